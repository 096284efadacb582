"""Which due jobs a limited claim on MariaDB takes: every due job, limited or not, in claim order,
within the limits, read in O(keys + limit) rows.

PostgreSQL does this in one statement (claim_limited), bounding each key's read with LATERAL ...
LIMIT. MariaDB has neither LATERAL nor a range seek bounded by another row's value, so the bounded
reads are statements of their own (queries.sql, after limited_queue_rooms), run here one after the
other inside the claim's transaction, under the limited-claim lock: the waiting keys one probe each,
then only as many of a key's jobs as it has room for, priority by priority.
"""

from __future__ import annotations

from typing import Any, Callable

Rows = list[dict[str, Any]]
Read = Callable[..., Rows]  # read(query_name, **params): the rows of one named query


def pick_limited(read: Read, params: dict[str, Any]) -> Rows:
    """The jobs (rows with their id) to lease, at most params["limit"], in claim order (priority DESC, run_after, id)."""
    limit = params["limit"]
    filters = {"task_names": params["task_names"], "queue_names": params["queue_names"]}
    queue_rooms = {row["queue_name"]: row["room"] for row in read("limited_queue_rooms", limit=limit)}
    # No key, no queue limit: the plain claim's read. It locks what it reads (SKIP LOCKED), so plain
    # claims skip these few rows until this transaction ends rather than wait for them.
    candidates = read("claim_ids", **params)
    for queue_name, room in queue_rooms.items():
        if room > 0:
            candidates += read("limited_queue_due_jobs", queue_name=queue_name, room=room, **filters)
    after = None
    while rows := read("next_waiting_key", after=after, limit=limit):
        after, room = rows[0]["limit_key"], rows[0]["room"]
        if room > 0:
            candidates += _key_jobs(read, after, room, filters)
    in_claim_order = sorted(candidates, key=lambda row: (-row["priority"], row["run_after"], row["id"]))
    return within_queue_rooms(in_claim_order, queue_rooms, limit)


def _key_jobs(read: Read, limit_key: str, room: int, filters: dict[str, Any]) -> Rows:
    """Up to `room` of a key's due jobs in claim order: the key's priorities from the top, each one
    read in run_after order (the index's), until the room is filled or no priority is left."""
    jobs: Rows = []
    below = None
    while len(jobs) < room:
        rows = read("waiting_key_level", limit_key=limit_key, below=below, room=room - len(jobs), **filters)
        if not rows:
            break
        below = rows[0]["level"]
        jobs += [row for row in rows if row["id"] is not None]
    return jobs


def within_queue_rooms(candidates: Rows, queue_rooms: dict[str, int], limit: int) -> Rows:
    """The first `limit` of `candidates` (in the order to take them), at most a limited queue's room of each."""
    picked: Rows = []
    taken_in_queue: dict[str, int] = {}
    for row in candidates:
        queue_name = row["queue_name"]
        if queue_name in queue_rooms and taken_in_queue.get(queue_name, 0) >= queue_rooms[queue_name]:
            continue
        taken_in_queue[queue_name] = taken_in_queue.get(queue_name, 0) + 1
        picked.append(row)
        if len(picked) == limit:
            break
    return picked
