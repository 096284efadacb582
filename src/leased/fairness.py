"""Fairness by key: a queue's starts shared between keys (tenants) by weight.

A job may carry a fairness key (`task.using(fairness_key="tenant-42")`, or a task's default
computed from its arguments). The claim serves a queue's waiting keys by stride scheduling: each
key has a virtual pass, the key with the least pass goes next, and each job it starts moves its pass
on by 1/weight. So with every key backlogged, starts split in proportion to the weights; a key with
nothing waiting takes no share (its share goes to the others) and banks no credit for later.
Weights are stored per (queue, key), with a default per queue (1 unless set): `app.fairness()` or
`leased fairness` changes them for the next claims. See docs/howto/fairness.md.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from leased.errors import ConfigurationError
from leased.limits import MAX_KEY, check_template

FairnessKeyFunction = Callable[..., str]


@dataclass(frozen=True, slots=True)
class FairKey:
    """A key with jobs waiting in a queue: the next served is the one of least `pass_`."""

    fairness_key: str
    waiting: int
    weight: float
    pass_: float


@dataclass(frozen=True, slots=True)
class QueueFairness:
    """A queue's weights, and (from `Leased.fairness_of`) its waiting keys, next served first."""

    queue_name: str
    default_weight: float = 1.0
    weights: Mapping[str, float] = field(default_factory=dict)
    waiting_keys: Sequence[FairKey] = ()

    def weight_of(self, fairness_key: str) -> float:
        return self.weights.get(fairness_key, self.default_weight)


def check_fairness_key(value: object, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_KEY:
        raise ConfigurationError(f"invalid fairness_key {value!r} from {where}: give a non-empty string of at "
                                 f"most {MAX_KEY} characters, such as the tenant's id: fairness_key=f'tenant-{{id}}'")
    return value


def check_weight(value: object, field_name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"invalid {field_name} {value!r}: give a number > 0 (a key of weight 3 "
                                 "starts three jobs for each one of a key of weight 1)")
    return float(value)


def check_weights(queue_name: str, weights: object, default: object) -> QueueFairness:
    """`Leased.fairness`'s arguments, checked whole before anything is written."""
    if not isinstance(weights, Mapping):
        raise ConfigurationError(f"invalid weights {weights!r} for queue {queue_name!r}: give a dict of "
                                 "{fairness_key: weight}, e.g. weights={'tenant-1': 3}")
    checked = {check_fairness_key(key, "weights"): check_weight(weight, f"weight of {key!r}")
               for key, weight in weights.items()}
    return QueueFairness(queue_name, check_weight(default, "default weight"), checked)


@dataclass(frozen=True)
class FairnessKeyOf:
    """A task's default fairness key: a template over its arguments ("tenant-{tenant_id}") or a
    function of them, computed at each enqueue."""

    task_name: str
    key: str | FairnessKeyFunction
    signature: inspect.Signature  # the handler's, without a TaskContext parameter

    def key_for(self, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]) -> str:
        where = f"the fairness_key of task {self.task_name!r}"
        if callable(self.key):
            return check_fairness_key(self.key(*args, **kwargs), where)
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return check_fairness_key(self.key.format(**bound.arguments), where)


def fairness_key_of(task_name: str, fairness_key: object, signature: inspect.Signature) -> FairnessKeyOf | None:
    """A task's FairnessKeyOf from its decorator's argument; None when it has none."""
    if fairness_key is None:
        return None
    if isinstance(fairness_key, str):
        check_template(task_name, fairness_key, signature, "fairness_key")
    elif not callable(fairness_key):
        raise ConfigurationError(f"invalid fairness_key {fairness_key!r} on task {task_name!r}: give a template "
                                 "such as 'tenant-{tenant_id}' or a function of the task's arguments")
    return FairnessKeyOf(task_name, fairness_key, signature)
