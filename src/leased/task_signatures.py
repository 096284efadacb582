"""Two apps on one database that share a task name: each worker stores its tasks' signatures with its
row, and live workers that register one name with different signatures are named, with the fix.

A worker claims every due job whose task name it has a handler for, whichever app enqueued it, so a
job whose arguments fit one app's handler fails for good in the other's. The signature is the text
of what a caller passes (the parameters after a TaskContext): names, kinds, annotations as written,
and simple defaults; a changed annotation or parameter reads as another signature.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from leased.admin import WorkerInfo

# Where the docs say how to keep apps apart; the warning names it.
KEEP_APPS_APART = ("give each app queues of its own (and its workers --queues naming only those), or tables of its "
                   "own (a schema or database per app): see 'Several apps on one database' in the configuration "
                   "reference")


class Registered(Protocol):
    """What a signature is read from (leased.tasks.Task, or the engine's Handler)."""

    func: Callable[..., Any]
    takes_context: bool


def signature_text(func: Callable[..., Any], takes_context: bool) -> str:
    """'(order_id: int, email: str = None, *, urgent: bool = False)': the parameters a caller passes."""
    parameters = list(inspect.signature(func).parameters.values())[1 if takes_context else 0:]
    return str(inspect.Signature([_shown(parameter) for parameter in parameters]))


class _Shown:
    """Text that a Signature prints as it is (its repr), for an annotation or a default."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _shown(parameter: inspect.Parameter) -> inspect.Parameter:
    annotation, default = parameter.annotation, parameter.default
    if annotation is not parameter.empty:
        # As written: a string under `from __future__ import annotations`, else the object's name.
        annotation = _Shown(annotation if isinstance(annotation, str) else inspect.formatannotation(annotation))
    if default is not parameter.empty:
        # An object's repr may hold its address, which differs per process: only plain values are shown.
        default = _Shown(repr(default) if default is None or isinstance(default, (bool, int, float, str)) else "...")
    return parameter.replace(annotation=annotation, default=default)


def signatures_json(tasks: Mapping[str, Registered]) -> str:
    """The worker row's task_signatures: {task name: signature text}, by name."""
    return json.dumps({name: signature_text(task.func, task.takes_context) for name, task in sorted(tasks.items())})


@dataclass(frozen=True, slots=True)
class SignatureClash:
    """One task name that two live workers register with different signatures."""

    task_name: str
    worker_id: str
    signature: str
    other_worker_id: str
    other_signature: str

    def __str__(self) -> str:
        return (f"task {self.task_name} has two signatures among live workers: {self.signature} on worker "
                f"{self.worker_id}, {self.other_signature} on worker {self.other_worker_id}. Two apps on one "
                f"database take each other's jobs of a task name they share: {KEEP_APPS_APART}")


def signature_clashes(workers: Iterable[WorkerInfo], involving: str | None = None) -> list[SignatureClash]:
    """Per task name that live workers register with more than one signature, one clash: the first
    worker to register it (in the order given, the start order) against the first with another
    signature; with `involving`, only the names that worker registers, against its signature.
    Workers from before the signatures were stored (none recorded) are left out."""
    alive = [worker for worker in workers if worker.alive and worker.task_signatures]
    clashes = []
    for name in sorted({name for worker in alive for name in worker.task_signatures}):
        registering = [(worker.id, worker.task_signatures[name]) for worker in alive if name in worker.task_signatures]
        if involving is not None:
            mine = [signature for worker_id, signature in registering if worker_id == involving]
            if not mine:
                continue
            registering = [(involving, mine[0])] + [pair for pair in registering if pair[0] != involving]
        first_id, first_signature = registering[0]
        other = next(((worker_id, signature) for worker_id, signature in registering if signature != first_signature),
                     None)
        if other is not None:
            clashes.append(SignatureClash(name, first_id, first_signature, *other))
    return clashes
