"""What a worker's id says: its host and pid, and under `leased worker --processes N` its supervisor.

The supervisor names itself to its worker processes in $LEASED_SUPERVISOR (host:pid). A worker
under one takes the id host:SUPERVISOR_PID/pid:nonce, so the dashboard can group the processes of
one supervisor without a column of its own in the workers table (the id is stored already).
"""

from __future__ import annotations

import os
import socket
import uuid

from leased.digits import whole_number

SUPERVISOR_VARIABLE = "LEASED_SUPERVISOR"


def default_worker_id() -> str:
    host, pid, nonce = socket.gethostname(), os.getpid(), uuid.uuid4().hex[:8]
    supervisor = os.environ.get(SUPERVISOR_VARIABLE, "")
    supervisor_host, _, supervisor_pid = supervisor.rpartition(":")
    if supervisor_host == host and whole_number(supervisor_pid) is not None:
        return f"{host}:{supervisor_pid}/{pid}:{nonce}"
    return f"{host}:{pid}:{nonce}"


def supervisor_pid(worker_id: str) -> int | None:
    """The pid of the supervisor a worker id names, or None (a worker of its own, or an id the user chose)."""
    parts = worker_id.split(":")
    if len(parts) != 3 or "/" not in parts[1]:
        return None
    supervisor, _, pid = parts[1].partition("/")
    return whole_number(supervisor) if whole_number(pid) is not None else None
