"""How a workflow's run is shown, alike by `leased workflow` and the dashboard: its steps as a tree
by dependency, their counts in the order a step goes through, and each step's parents that the
tree's indent does not show."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

STEP_STATUSES = ("waiting", "pending", "running", "sleeping", "done", "failed", "cancelled")


@dataclasses.dataclass(frozen=True, slots=True)
class TreeRow:
    depth: int  # how far it is indented: under the parent that comes last in dependency order
    step: Any  # a leased.runs.StepInfo
    others: tuple[str, ...]  # its other parents, which the indent does not show


def step_tree(steps: Sequence[Any]) -> list[TreeRow]:
    """A run's steps as a tree by dependency: each step under one of its parents (the one that
    comes last in dependency order, so that every parent is listed before it in a batch's fan-in),
    its other parents named beside it. Steps added at run time may have parents with higher job ids
    than their own, so the order is a topological sort, not the ids'."""
    by_name = {step.name: step for step in steps}
    order = {step.name: index for index, step in enumerate(steps)}
    parents = {step.name: [name for name in step.parents if name in by_name] for step in steps}
    waiting = {name: len(names) for name, names in parents.items()}
    children: dict[str, list[str]] = {name: [] for name in by_name}
    for name, names in parents.items():
        for parent in names:
            children[parent].append(name)
    ready = sorted((name for name, count in waiting.items() if count == 0), key=order.__getitem__)
    position: dict[str, int] = {}
    while ready:  # Kahn's sort, taking the lowest job id first
        name = ready.pop(0)
        position[name] = len(position)
        for child in children[name]:
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
        ready.sort(key=order.__getitem__)
    for step in steps:  # a cycle, which leased never writes: shown at the end, unindented
        position.setdefault(step.name, len(position))
    under: dict[str | None, list[str]] = {}
    primary: dict[str, str | None] = {}
    for name in sorted(by_name, key=position.__getitem__):
        placed = [parent for parent in parents[name] if position[parent] < position[name]]
        primary[name] = max(placed, key=position.__getitem__) if placed else None
        under.setdefault(primary[name], []).append(name)
    rows: list[TreeRow] = []

    def visit(name: str, depth: int) -> None:
        step = by_name[name]
        rows.append(TreeRow(depth, step, tuple(parent for parent in step.parents if parent != primary[name])))
        for child in under.get(name, ()):
            visit(child, depth + 1)

    for root in under.get(None, ()):
        visit(root, 0)
    return rows


def step_counts(counts: dict[str, int], skipped: int = 0) -> str:
    """'3 done, 1 failed, 1 cancelled (1 skipped)', in the order a step goes through."""
    parts = [f"{counts[status]} {status}" for status in STEP_STATUSES if counts.get(status)]
    parts += [f"{count} {status}" for status, count in counts.items() if status not in STEP_STATUSES and count]
    text = ", ".join(parts) or "no steps"
    return text + (f" ({skipped} skipped)" if skipped else "")


def parents_note(row: TreeRow, named: int = 2) -> str:
    """Its parents when more than the one the tree indents it under, its when= if not the default,
    who added it. Every parent is counted, the indent's too: "after a, b +3 more", which left it
    out, read as five parents for six, and "also after" still asked the reader to add one. So:
    "after orders, refunds, check" (all named, up to three), or "after 6 steps: plan, ... +4 more"."""
    notes = []
    parents = row.step.parents
    if len(parents) > 1:
        if len(parents) <= named + 1:
            notes.append(f"after {', '.join(parents)}")
        else:
            notes.append(f"after {len(parents)} steps: {', '.join(parents[:named])} +{len(parents) - named} more")
    if str(row.step.run_when) != "succeeded":
        notes.append(f"when {row.step.run_when}")
    if row.step.added_by:
        notes.append(f"added by {row.step.added_by}")
    return "; ".join(notes) or "-"
