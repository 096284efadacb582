"""The shared parts, wired over one database: what each SQL backend (sqlite/backend.py,
postgres/backend.py, mariadb/backend.py) builds and exposes the port verbs of, by delegation.

Each part is one area, built from the Database (database.py, the dialect with the conflict retry,
rows to values and wake-ups) and the parts it needs, never a subclass of anything:

    inspection.py  the inspection port's reads            schedules.py  periodic jobs
    step_ends.py   what a step's end does to its workflow workflows.py  runs, their steps and reads
    leases.py      renew, finish, release, reclaim        admin.py      retry, cancel, pause, limits
    fenced.py      ends and steps in a caller's transaction
    retention.py   pruning                                schema.py     check and migrate
    producer.py    enqueue                                waits.py      sleeps and signals

The write verbs PostgreSQL may do in one statement each are listed in writes.py; `shared_writes`
here is the shared way of doing them, which SQLite and MariaDB expose as they are.
"""

from __future__ import annotations

from leased.backends.sql.admin import Admin
from leased.backends.sql.database import Database
from leased.backends.sql.inspection import Inspection
from leased.backends.sql.leases import Leases
from leased.backends.sql.producer import Producer
from leased.backends.sql.retention import Retention
from leased.backends.sql.schedules import Schedules
from leased.backends.sql.schema import Schema
from leased.backends.sql.step_ends import StepEnds
from leased.backends.sql.waits import Waits
from leased.backends.sql.workflows import Workflows
from leased.backends.sql.writes import SharedSequence


class SQLParts:
    def __init__(self, database: Database):
        self.database = database
        self.inspection = Inspection(database)
        self.step_ends = StepEnds(database)
        self.waits = Waits(database)
        self.leases = Leases(database, self.step_ends, self.waits)
        self.admin = Admin(database, self.step_ends, self.inspection)
        self.retention = Retention(database)
        self.shared_writes = SharedSequence(self.leases, self.admin, self.retention)
        self.schedules = Schedules(database)
        self.workflows = Workflows(database, self.step_ends)
        self.schema = Schema(database)
        self.producer = Producer(database)
