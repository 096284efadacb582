"""Workflows: steps (jobs) that wait for other steps, written in one transaction, released with no
coordinator by the finish of their last parent (see backends/sql/workflows.py for how).

    wf = app.workflow("nightly-report")
    orders = wf.add(extract, "orders")
    refunds = wf.add(extract.using(queue_name="slow"), "refunds", name="refunds")
    report = wf.add(merge, after=[orders, refunds])
    wf.add(notify, "ops", after=[report], when="finished")
    run = wf.enqueue()

A builder writes nothing until enqueue(); every mistake (a cycle, a parent from another workflow,
an unknown task, no steps, a name twice) is refused before anything is written. `chain` and
`batch` are the two common shapes, spelled as Celery users know them (chain, chord).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from leased import tracing
from leased.errors import ConfigurationError, PermanentError, SignalTimeout
from leased.jobs import JobStatus, NewJob
from leased.runs import Enqueued, NewStep, NewWorkflow, ParentEnd, RunWhen
from leased.names import check_derived_name, check_name
from leased.tasks import Task, TaskCall

# What a step runs: a task, or a task with options (task.using(...)). A step's arguments are not
# checked against the task's parameters by a type checker: add() spells its own options (name=,
# after=, when=) among the task's keyword arguments, which a ParamSpec cannot express; enqueue()
# and the builder check them at run time, before anything is written.
StepTask = Task[..., Any] | TaskCall[..., Any]


class WorkflowApp(Protocol):
    """What a builder needs of its app (leased.app.Leased): the tasks it knows, and the write."""

    @property
    def tasks(self) -> Mapping[str, Task[..., Any]]: ...

    def enqueue_workflow(self, workflow: NewWorkflow, connection: Any = None) -> Enqueued: ...

    def task(self, *, takes_context: bool, name: str) -> Callable[[Callable[..., Any]], Task[..., Any]]: ...


# The task of a step that only waits for a signal (Workflow.wait_for): leased's own, registered on an
# app by the first wait_for() of its workflows and by each of its workers, which run such steps.
WAIT_STEP = "leased.wait_for"


def wait_step(context: Any, signal: str, timeout_seconds: float | None = None) -> Any:
    """A step that only waits: its result is the signal's payload; past its timeout it fails, as a
    step fails (its children then follow their `when`), not retried."""
    try:
        return context.wait_for(signal, timeout=timeout_seconds)
    except SignalTimeout as timed_out:
        raise PermanentError(str(timed_out)) from timed_out


def wait_step_task(app: WorkflowApp) -> Task[..., Any]:
    """The app's wait step task, registered on first use."""
    return app.tasks.get(WAIT_STEP) or app.task(takes_context=True, name=WAIT_STEP)(wait_step)


@dataclass(frozen=True, eq=False)
class Step:
    """A step of a workflow being built: pass it in another step's `after=`."""

    workflow: Workflow = field(repr=False)
    name: str
    index: int

    def __repr__(self) -> str:
        return f"<Step {self.name!r} of workflow {self.workflow.name!r}>"


@dataclass(frozen=True, slots=True)
class Run:
    """An enqueued workflow: its id, and each step's job id by step name."""

    id: int
    job_ids: dict[str, int]
    created: bool = True  # False: an unfinished run held the idempotency key, and is this one


@dataclass(frozen=True, slots=True)
class _Planned:
    call: TaskCall[..., Any]
    job: NewJob  # built as the step is added: its arguments are checked there
    name: str
    parents: tuple[int, ...]
    run_when: RunWhen
    previous: int | None


class Workflow:
    """A builder: add steps, then enqueue() them in one transaction. Nothing is written before."""

    def __init__(self, app: WorkflowApp, name: str, idempotency_key: str | None = None):
        self.app = app
        self.name = check_name(name, "workflow name")
        self.idempotency_key = None if idempotency_key is None else check_name(idempotency_key, "idempotency_key")
        self._steps: list[_Planned] = []
        self._names: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"<Workflow {self.name!r}: {len(self._steps)} steps>"

    @property
    def steps(self) -> list[Step]:
        return [Step(self, planned.name, index) for index, planned in enumerate(self._steps)]

    def add(self, task: StepTask, /, *args: Any, name: str | None = None,
            after: Iterable[Step] = (), when: str = "succeeded", kwargs: Mapping[str, Any] | None = None,
            **task_kwargs: Any) -> Step:
        """A step running `task(*args, **kwargs)` once every step in `after` has ended, as `when`
        says: "succeeded" (the default), "finished" (whatever their outcomes) or "failed" (at least
        one failed or was cancelled: a compensation step). A task whose own parameters are called
        `name`, `after`, `when` or `kwargs` takes its keyword arguments in `kwargs=`, a mapping."""
        call = _call(task)
        keywords = _task_keywords(call, kwargs, task_kwargs, name=name, after=after, when=when)
        return self._add(call, args, keywords, name, after, when, previous=None)

    def _add(self, task: StepTask, args: tuple[Any, ...], kwargs: dict[str, Any], name: str | None,
             after: Iterable[Step], when: str, previous: Step | None) -> Step:
        call = _call(task)
        if call.idempotency_key is not None:
            raise ConfigurationError(f"step {name or call.task.name!r}: a step's job takes no idempotency_key; give "
                                     "the workflow one (app.workflow(name, idempotency_key=...))")
        if call.connection is not None:
            raise ConfigurationError(f"step {name or call.task.name!r}: pass the connection to enqueue(), "
                                     "which writes every step in its transaction")
        run_when = _run_when(when, name or call.task.name)
        parents = tuple(self._parent(step, name or call.task.name) for step in after)
        if len(set(parents)) != len(parents):
            raise ConfigurationError(f"step {name or call.task.name!r} names the same parent twice in after=")
        step_name = self._step_name(name, call.task.name)
        job = _step_job(call, tuple(args), dict(kwargs), chained=previous is not None)
        previous_index = None if previous is None else previous.index
        self._steps.append(_Planned(call, job, step_name, parents, run_when, previous_index))
        self._names[step_name] = len(self._steps) - 1
        return Step(self, step_name, len(self._steps) - 1)

    def chain(self, *calls: StepTask | tuple[Any, ...], after: Iterable[Step] = ()) -> list[Step]:
        """Steps that run one after another, each given the previous one's result as its first
        argument (Celery's chain). Each call is a task, or a tuple `(task, *args)`."""
        steps: list[Step] = []
        for call in calls:
            task, args = (call[0], tuple(call[1:])) if isinstance(call, tuple) else (call, ())
            previous = steps[-1] if steps else None
            steps.append(self._add(task, args, {}, None, [previous] if previous else after, "succeeded", previous))
        return steps

    def wait_for(self, signal: str, *, after: Iterable[Step] = (), timeout: float | timedelta | None = None,
                 name: str | None = None) -> Step:
        """A step that only waits for signal `signal` (Leased.signal, to this step's job:
        `run.job_ids[name]`), once every step in `after` has succeeded; its result, which its
        children read, is the signal's payload. Past `timeout` (seconds or a timedelta, counted
        from when the step began to wait) it fails like any step. Named after the signal unless
        `name` says otherwise: an approval gate in one line."""
        check_name(signal, "signal name")
        seconds = None if timeout is None else _timeout_seconds(timeout, name or signal)
        return self.add(wait_step_task(self.app), signal, seconds, name=name or signal, after=after)

    def batch(self, task: StepTask, calls: Iterable[Sequence[Any]], *, then: StepTask | tuple[Any, ...],
              name: str | None = None) -> tuple[list[Step], Step]:
        """One step per call of `task` (a tuple of arguments each), then `then` once all of them
        have ended, whatever their outcomes; it reads how many succeeded and failed from
        `context.batch` (Celery's chord, which runs its callback only if all succeeded)."""
        base = name or _call(task).task.name
        members = [self.add(task, *_arguments(args), name=f"{base}-{position + 1}", kwargs={})
                   for position, args in enumerate(calls)]
        then_task, then_args = (then[0], tuple(then[1:])) if isinstance(then, tuple) else (then, ())
        if not members:
            raise ConfigurationError(f"batch {base!r} has no calls: give at least one")
        return members, self.add(then_task, *then_args, after=members, when="finished", kwargs={})

    def new_workflow(self) -> NewWorkflow:
        """What enqueue() writes, checked whole first."""
        if not self._steps:
            raise ConfigurationError(f"workflow {self.name!r} has no steps: add() at least one before enqueue()")
        for planned in self._steps:
            if planned.call.task.name not in self.app.tasks:
                raise ConfigurationError(f"step {planned.name!r}: task {planned.call.task.name!r} is not registered "
                                         "with this app, so no worker could run it")
        # Its steps continue the trace of the enqueue, not of each add(): one trace per run.
        trace_context = tracing.current_trace_context()
        return NewWorkflow(self.name, tuple(_new_step(planned, trace_context) for planned in self._steps),
                           self.idempotency_key)

    def enqueue(self, connection: Any = None) -> Run:
        """Write the whole workflow in one transaction (the caller's, on `connection`): every step
        exists, or none does. With an idempotency key an unfinished run holds, that run is returned."""
        with tracing.sending(f"workflow {self.name}", None, len(self._steps)):
            enqueued = self.app.enqueue_workflow(self.new_workflow(), connection)
        return _run(enqueued)

    async def aenqueue(self) -> Run:
        """enqueue() for async code: the write runs on a thread, so the event loop runs on."""
        with tracing.sending(f"workflow {self.name}", None, len(self._steps)):
            new = self.new_workflow()
            return _run(await asyncio.to_thread(self.app.enqueue_workflow, new, None))

    def _parent(self, step: Any, child: str) -> int:
        if not isinstance(step, Step):
            raise ConfigurationError(f"step {child!r}: after= takes steps that add() returned, got {step!r}")
        if step.workflow is not self:
            raise ConfigurationError(f"step {child!r}: after= names step {step.name!r} of another workflow "
                                     f"({step.workflow.name!r}); a step waits only for steps of its own")
        return step.index

    def _step_name(self, name: str | None, task_name: str) -> str:
        if name is not None:
            name = check_name(name, "step name")
            if name in self._names:
                raise ConfigurationError(f"workflow {self.name!r} has a step named {name!r} already; give each step "
                                         "its own name=")
            return name
        if task_name not in self._names:
            return task_name
        number = 2
        while f"{task_name}-{number}" in self._names:
            number += 1
        return check_derived_name(f"{task_name}-{number}", "step", task_name)


class RunningWorkflow:
    """`context.workflow` in a running step: add steps to its own run (fan-out decided at run time).
    The steps that wait for this step wait for the added ones too. Each is written at once, fenced on
    this attempt's lease, so an attempt that then raises leaves its steps in the run, and they run;
    a name the run has already is that step (a retried handler adds the same names again, and gets
    the same steps). A step added without name= is named after its adder and
    its task, numbered in the order of adds: `plan/resize-1`, `plan/resize-2` (see _derived)."""

    def __init__(self, store: Any, context: Any):
        self._store = store
        self._context = context
        self._numbers: dict[str, int] = {}
        self._run_names: dict[str, int] | None = None  # the run's step names, read at the first derived name

    @property
    def id(self) -> int:
        workflow_id: int = self._context.claimed.workflow_id  # a step's: TaskContext.workflow checked it
        return workflow_id

    def add(self, task: StepTask, /, *args: Any, name: str | None = None, after: Iterable[int] = (),
            when: str = "succeeded", kwargs: Mapping[str, Any] | None = None, **task_kwargs: Any) -> int:
        """Add one step; returns its job id. `after`: job ids of steps of this run. The task's
        keyword arguments go in `kwargs=` when it has parameters named as these options."""
        keywords = _task_keywords(_call(task), kwargs, task_kwargs, name=name, after=after, when=when)
        return self.add_many([(task, args, keywords, name, tuple(after), when)])[0]

    def add_many(self, steps: Iterable[tuple[Any, ...]]) -> list[int]:
        """Add several steps in one transaction: each a tuple (task, args, kwargs, name, after, when)."""
        planned = []
        for task, args, kwargs, name, after, when in steps:
            call = _call(task)
            step_name = check_name(name, "step name") if name is not None else self._derived(call.task.name)
            parents = tuple(-1 - int(job_id) for job_id in after)
            planned.append(_Planned(call, _step_job(call, tuple(args), dict(kwargs)), step_name, parents,
                                    _run_when(when, step_name), None))
        trace_context = tracing.current_trace_context()  # the adding attempt's span
        new = [_new_step(step, trace_context) for step in planned]
        ids = self._store.add_steps(self._context.claimed.lease, new)
        return [ids[step.name] for step in new]

    def _derived(self, task_name: str) -> str:
        # The same order of adds in each attempt gives the same names: a retry adds nothing twice.
        number = self._numbers[task_name] = self._numbers.get(task_name, 0) + 1
        if self._run_names is None:
            self._run_names = self._store.step_names(self.id)
        job_id = self._context.job_id
        # Earlier releases named these "resize-1 of 15" (15: the adder's job id), which read as a
        # count. A step that an attempt before the upgrade added under that name is the same step
        # (docs/upgrading.md).
        legacy = f"{task_name}-{number} of {job_id}"
        if legacy in self._run_names:
            return legacy
        adder = next((name for name, step_id in self._run_names.items() if step_id == job_id), str(job_id))
        return check_derived_name(f"{adder}/{task_name}-{number}", "step", task_name)


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """What the step after a batch learns of its members: `context.batch`."""

    succeeded: int  #: a count, not a list: the members are in `results`
    failed: int  #: failed or cancelled: a count
    results: dict[str, Any]  #: each member's result that succeeded, by step name

    @property
    def total(self) -> int:
        return self.succeeded + self.failed


def batch_outcome(parents: dict[str, ParentEnd]) -> BatchOutcome:
    succeeded = {name: end.result for name, end in parents.items() if end.status is JobStatus.DONE}
    return BatchOutcome(len(succeeded), len(parents) - len(succeeded), succeeded)


def _run(enqueued: Enqueued) -> Run:
    return Run(enqueued.workflow_id, enqueued.job_ids, enqueued.created)


def _new_step(planned: _Planned, trace_context: str | None) -> NewStep:
    return NewStep(planned.name, planned.job._replace(trace_context=trace_context), planned.parents,
                   planned.run_when, planned.previous)


def _step_job(call: TaskCall[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], chained: bool = False) -> NewJob:
    # A chain's step gets its previous step's result as its first argument, written at release.
    return call.new_job(args, kwargs, after_result=chained)


def _call(task: Any) -> TaskCall[..., Any]:
    if isinstance(task, Task):
        return task.using()
    if isinstance(task, TaskCall):
        return task
    raise ConfigurationError(f"a step runs a task (an @app.task function, or task.using(...)), got {task!r}")


_STEP_OPTION_DEFAULTS = {"name": None, "after": (), "when": "succeeded"}


def _task_keywords(call: TaskCall[..., Any], explicit: Mapping[str, Any] | None, loose: dict[str, Any],
                   **options: Any) -> dict[str, Any]:
    """The task's keyword arguments: `kwargs=` (a mapping) and any other keywords add() was given.
    add()'s own options (name=, after=, when=) would silently take a task parameter of the same
    name, so given loosely beside such a parameter they are refused as a collision: `kwargs=`
    says which is which."""
    if explicit is None:
        parameters = call.task.call_shape.parameters
        for option, value in options.items():
            if option in parameters and value != _STEP_OPTION_DEFAULTS[option]:
                raise ConfigurationError(
                    f"step {call.task.name!r}: {option}= is the step's {option}, and task {call.task.name!r} has a "
                    f"parameter {option!r} too; pass the task's keyword arguments as kwargs= "
                    f"(add({call.task.name}, kwargs={{{option!r}: ...}})), and {option}= stays the step's")
        return loose
    if not isinstance(explicit, Mapping):
        raise ConfigurationError(f"step {call.task.name!r}: kwargs= takes a mapping of the task's keyword "
                                 f"arguments, got {type(explicit).__name__}")
    twice = sorted(set(explicit) & set(loose))
    if twice:
        raise ConfigurationError(f"step {call.task.name!r}: {', '.join(map(repr, twice))} given both in kwargs= "
                                 "and as a keyword; give each argument once")
    return {**explicit, **loose}


def _arguments(args: Any) -> tuple[Any, ...]:
    return tuple(args) if isinstance(args, (tuple, list)) else (args,)


def _run_when(when: Any, step: str) -> RunWhen:
    try:
        return RunWhen(when)
    except ValueError:
        choices = ", ".join(repr(value.value) for value in RunWhen)
        raise ConfigurationError(f"step {step!r}: invalid when={when!r}; use one of {choices}") from None


def _timeout_seconds(timeout: Any, step: str) -> float:
    """A wait step's timeout in seconds, or an error naming the step and the fix."""
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds <= 0:
        raise ConfigurationError(f"step {step!r}: timeout must be a positive number of seconds or a timedelta, "
                                 f"got {timeout!r}")
    return float(seconds)
