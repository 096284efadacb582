"""Which fair jobs a claim on MariaDB takes: stride scheduling over each queue's waiting keys
(docs/howto/fairness.md), from bounded reads, as limited.py does for limits.

SQLite does this in one statement (claim_fair). MariaDB has no LATERAL and no LIMIT inside IN
subqueries, so each bounded read is a statement of its own (queries.sql, after fairness_in_use):
a queue's keys of least pass, then as many of each key's jobs as can be among the batch. The merge
by virtual time is here. It runs under the limited-claim lock, inside the claim's transaction.
"""

from __future__ import annotations

from typing import Any

from leased.backends.mariadb.limited import Read, Rows, within_queue_rooms


def pick_fair(read: Read, params: dict[str, Any]) -> Rows:
    """The fair jobs to lease, at most params["limit"]: the jobs of least virtual time, where a
    key's r-th job (from 0, in claim order) is at pass + r / weight, within the queues' limits."""
    limit = params["limit"]
    task_names = params["task_names"]
    queue_rooms = {row["queue_name"]: row["room"] for row in read("limited_queue_rooms", limit=limit)}
    timed = []
    for queue in read("fair_queues", queue_names=params["queue_names"]):
        queue_name = queue["queue_name"]
        keys = read("fair_candidate_keys", queue_name=queue_name, task_names=task_names, limit=limit)
        if not keys:
            continue
        least, greatest = keys[0]["pass"], max(key["pass"] for key in keys)
        for key in keys:
            # With `limit` keys read, none of a key's jobs past the greatest of their passes can be
            # among the batch: keys level with each other read their head alone.
            room = limit if len(keys) < limit else min(limit, int((greatest - key["pass"]) * key["weight"] + 1e-9) + 1)
            jobs = read("fair_key_jobs", queue_name=queue_name, fairness_key=key["fairness_key"],
                        task_names=task_names, room=room)
            timed += [(round(key["pass"] + place / key["weight"], 9) - least, key["fairness_key"], place, job)
                      for place, job in enumerate(jobs)]
    in_virtual_time_order = [job for *_, job in sorted(timed, key=lambda each: each[:3])]
    return within_queue_rooms(in_virtual_time_order, queue_rooms, limit)
