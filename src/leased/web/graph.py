"""The workflow page's graph: a run's steps as nodes in columns by dependency, edges from each
step to the steps that wait for it, drawn as SVG by the template (no script, as the throughput
chart). Layout is computed here, on the server, so the page costs nothing to draw.

A step's column is its longest path from a step with no parents, so every edge runs left to
right. Large fan-outs collapse: steps in one column with the same task, the same parents, the same
children and the same adder (a batch's members, one adder's run-time steps) become one node,
"resize x 120", coloured by the least finished status among them and labelled with their counts,
once there are more than FAN_OUT_SHOWN of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from leased.run_views import STEP_STATUSES

FAN_OUT_SHOWN = 5  # siblings drawn one by one; more collapse into one node
NODE_WIDTH, NODE_HEIGHT = 168, 44
COLUMN_GAP, ROW_GAP = 56, 14
PADDING = 8
LABEL_CHARACTERS = 22  # a longer name is cut with "…"; the node's tooltip has it whole
# The status a collapsed node shows: the one furthest from finished, then failure before success,
# so that a group with one failed member among done ones reads as failed.
_SHOWN_FIRST = ("running", "sleeping", "pending", "waiting", "failed", "cancelled", "done")


@dataclass(frozen=True, slots=True)
class Node:
    x: int
    y: int
    label: str  # the step's name, or "task x count" for a collapsed group
    detail: str  # a step's task and status, or a group's counts
    status: str  # the CSS class's status: a step's, or a group's shown status
    title: str  # the tooltip: every name, whole
    job_id: int | None  # the step's job page; None for a group
    count: int  # steps it stands for


@dataclass(frozen=True, slots=True)
class Edge:
    path: str  # an SVG path: a curve from the parent's right side to the child's left side
    added: bool  # from the step that added the child at run time (drawn dashed), not one it waits for


@dataclass(frozen=True, slots=True)
class Graph:
    width: int
    height: int
    nodes: list[Node]
    edges: list[Edge]
    collapsed: int  # how many groups were collapsed
    node_width: int = NODE_WIDTH
    node_height: int = NODE_HEIGHT


def step_graph(steps: Sequence[Any]) -> Graph:
    """The graph of a run's steps (leased.runs.StepInfo), laid out in columns."""
    names = {step.name for step in steps}
    parents = {step.name: tuple(name for name in step.parents if name in names) for step in steps}
    children: dict[str, list[str]] = {step.name: [] for step in steps}  # the steps that wait for it
    for name, of in parents.items():
        for parent in of:
            children[parent].append(name)
    # A step added at run time is placed after its adder too (a dashed edge), though it waits for
    # nothing: it cannot start before the adder ran.
    adders = {step.name: step.added_by for step in steps if step.added_by in names}
    placed_after = {name: of + ((adders[name],) if name in adders else ()) for name, of in parents.items()}
    follows: dict[str, list[str]] = {step.name: [] for step in steps}
    for name, of in placed_after.items():
        for parent in of:
            follows[parent].append(name)
    column = _columns([step.name for step in steps], placed_after, follows)
    groups: dict[tuple, list[Any]] = {}
    for step in steps:  # in job id order: each column's nodes read top to bottom as they were added
        key = (column[step.name], step.task_name, frozenset(parents[step.name]),
               frozenset(children[step.name]), step.added_by)
        groups.setdefault(key, []).append(step)
    node_of: dict[str, int] = {}
    planned: list[tuple[int, list[Any]]] = []
    for key, members in groups.items():
        units = [members] if len(members) > FAN_OUT_SHOWN else [[member] for member in members]
        for unit in units:
            for member in unit:
                node_of[member.name] = len(planned)
            planned.append((key[0], unit))
    rows: dict[int, int] = {}
    nodes: list[Node] = []
    for col, unit in planned:
        row = rows[col] = rows.get(col, -1) + 1
        nodes.append(_node(unit, PADDING + col * (NODE_WIDTH + COLUMN_GAP), PADDING + row * (NODE_HEIGHT + ROW_GAP)))
    pairs = sorted({(node_of[parent], node_of[name]) for name, of in parents.items() for parent in of})
    added = sorted({(node_of[adder], node_of[name]) for name, adder in adders.items()} - set(pairs))
    edges = [Edge(_curve(nodes[start], nodes[end]), added=False) for start, end in pairs if start != end]
    edges += [Edge(_curve(nodes[start], nodes[end]), added=True) for start, end in added if start != end]
    columns = max(column.values(), default=-1) + 1
    tallest = max(rows.values(), default=-1) + 1
    return Graph(width=2 * PADDING + columns * NODE_WIDTH + max(columns - 1, 0) * COLUMN_GAP,
                 height=2 * PADDING + tallest * NODE_HEIGHT + max(tallest - 1, 0) * ROW_GAP,
                 nodes=nodes, edges=edges, collapsed=sum(1 for _, unit in planned if len(unit) > 1))


def _columns(order: list[str], parents: dict[str, tuple[str, ...]], children: dict[str, list[str]]) -> dict[str, int]:
    """Each step's longest path from a step without parents, in dependency order (Kahn's sort, no
    recursion: a chain may be thousands long). A cycle, which leased never writes, goes in column 0."""
    waiting = {name: len(of) for name, of in parents.items()}
    column = {name: 0 for name in order}
    ready = [name for name in order if not waiting[name]]
    while ready:
        name = ready.pop()
        for child in children[name]:
            column[child] = max(column[child], column[name] + 1)
            waiting[child] -= 1
            if not waiting[child]:
                ready.append(child)
    return column


def _node(unit: list[Any], x: int, y: int) -> Node:
    if len(unit) == 1:
        step = unit[0]
        status = str(step.status)
        detail = status if step.task_name == step.name else f"{_cut(step.task_name, 14)} · {status}"
        return Node(x, y, _cut(step.name), detail, status,
                    f"{step.name} ({step.task_name}): {status}", step.job_id, 1)
    counts: dict[str, int] = {}
    for step in unit:
        counts[str(step.status)] = counts.get(str(step.status), 0) + 1
    shown = next(status for status in _SHOWN_FIRST if counts.get(status))
    detail = ", ".join(f"{counts[status]} {status}" for status in STEP_STATUSES if counts.get(status))
    first, last = unit[0].name, unit[-1].name
    return Node(x, y, _cut(f"{unit[0].task_name} × {len(unit)}"), detail, shown,
                f"{len(unit)} steps, {first} … {last}: {detail}", None, len(unit))


def _curve(start: Node, end: Node) -> str:
    x1, y1 = start.x + NODE_WIDTH, start.y + NODE_HEIGHT // 2
    x2, y2 = end.x, end.y + NODE_HEIGHT // 2
    if x2 - x1 <= COLUMN_GAP:  # to the next column: one curve across the gap
        bend = max((x2 - x1) // 2, 16)
        return f"M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2} {x2},{y2}"
    # Past a column: along the gap under the start's row, where no node is, not through the nodes
    # that column holds; curving into it and out of it in the gaps between columns.
    half = COLUMN_GAP // 2
    lane = start.y + NODE_HEIGHT + ROW_GAP // 2
    return (f"M{x1},{y1} C{x1 + half},{y1} {x1},{lane} {x1 + half},{lane} L{x2 - half},{lane} "
            f"C{x2},{lane} {x2 - half},{y2} {x2},{y2}")


def _cut(text: str, limit: int = LABEL_CHARACTERS) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"
