"""The claim stays at the head of the due set however much history the table holds."""

from __future__ import annotations

import json
import re
from contextlib import contextmanager

from leased.backends.mariadb.backend import QUERIES as MARIADB
from leased.backends.postgres.queries import QUERIES as POSTGRES
from leased.backends.sqlite.backend import QUERIES as SQLITE

HISTORY = 20_000


def test_claim_reads_the_due_index_not_the_table(app, backend_name):
    app.counts()  # schema
    if backend_name == "sqlite":
        connection = app.backend._connection()
        connection.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
            "INSERT INTO leased_jobs (task_name, queue_name, status, max_attempts, lease_seconds, run_after, "
            "created_at, finished_at) SELECT 't', 'default', CASE WHEN i % 100 = 0 THEN 'pending' ELSE 'done' END, "
            "3, 30, 0, 0, 0 FROM n", (HISTORY,))
        connection.execute("ANALYZE")
        params = {"worker_id": "w", "task_names": json.dumps(["t"]), "queue_names": None, "limit": 10}
        plan = " ".join(row[3] for row in connection.execute("EXPLAIN QUERY PLAN " + SQLITE["claim"], params))
        assert "USING INDEX leased_jobs_due" in plan and "SCAN leased_jobs " not in plan + " ", plan
        return
    if backend_name == "mariadb":
        plan = _mariadb_claim_plan(app)
        assert plan["key"] == "leased_jobs_due" and plan["type"] == "range" and int(plan["rows"]) <= HISTORY // 50, plan
        return
    plan = _postgres_claim_plan(app, "CASE WHEN i %% 100 = 0 THEN 'pending' ELSE 'done' END", analyze=True)
    _assert_claim_reads_due_set(plan)


def test_a_burst_into_a_table_without_statistics_is_claimed_through_the_due_index(app, backend_name):
    """Before autovacuum's first ANALYZE the planner would sort every pending row for each claim."""
    if backend_name != "postgres":
        return  # SQLite's claim names its index
    app.counts()
    plan = _postgres_claim_plan(app, "'pending'", analyze=False)
    _assert_claim_reads_due_set(plan)


def test_the_claims_generic_plan_reads_the_due_set_too(app, backend_name):
    """The claim connections use generic plans (claim_settings), made without the parameters' values."""
    if backend_name != "postgres":
        return  # only PostgreSQL prepares the claim
    app.counts()  # schema
    plan = _postgres_claim_plan(app, "CASE WHEN i %% 100 = 0 THEN 'pending' ELSE 'done' END", analyze=True,
                                generic=True)
    _assert_claim_reads_due_set(plan)


def _assert_claim_reads_due_set(plan: str) -> None:
    """PostgreSQL's claim reads leased_due (migration 0018): the head of each generation's index
    in claim order, merged, and each claimed job by primary key."""
    for generation in ("0", "1", "2", "later"):
        assert f"Index Scan using leased_due_{generation}_priority_run_after_id_idx" in plan, plan
    assert "Merge Append" in plan and "leased_jobs_pkey" in plan, plan
    assert "Seq Scan on leased_jobs" not in plan and "Seq Scan on leased_due" not in plan, plan
    assert not re.search(r"->  (Incremental )?Sort ", plan) and "Bitmap" not in plan, plan


def _postgres_claim_plan(app, status_sql: str, *, analyze: bool, generic: bool = False) -> str:
    """The claim's plan over HISTORY rows, under the planner settings the backend sends with it."""
    import psycopg

    with psycopg.connect(app.database_url, autocommit=True) as connection:
        connection.execute(
            "INSERT INTO leased_jobs (task_name, queue_name, status, max_attempts, lease_seconds, finished_at) "
            f"SELECT 't', 'default', {status_sql}, 3, 30, now() FROM generate_series(1, %s) AS i", (HISTORY,))
        if analyze:
            connection.execute("ANALYZE leased_jobs")
        with connection.transaction():
            connection.execute(POSTGRES["claim_settings"], {"for_transaction": True})
            if generic:  # as a prepared claim runs: its plan made once, for any values
                claim = POSTGRES["claim"]
                for number, name in enumerate(("worker_id", "task_names", "queue_names", "limit"), 1):
                    claim = claim.replace(f"%({name})s", f"${number}")
                connection.execute(f"PREPARE generic_claim (text, text[], text[], integer) AS {claim}")
                return "\n".join(row[0] for row in connection.execute(
                    "EXPLAIN EXECUTE generic_claim ('w', ARRAY['t'], NULL, 10)"))
            return "\n".join(row[0] for row in connection.execute(  # EXPLAIN alone runs nothing
                "EXPLAIN " + POSTGRES["claim"], {"worker_id": "w", "task_names": ["t"], "queue_names": None,
                                                 "limit": 10}))


def test_the_reclaim_reads_the_running_jobs_once(app, backend_name):
    """The once-a-second reclaim reads every entry of leased_jobs_leases, and under a held vacuum
    horizon there is one for each job claimed since: it reads them once, and locks the lapsed
    leases by primary key (it read them twice, the second time to count the workflow steps left)."""
    if backend_name != "postgres":
        return  # SQLite and MariaDB read their lease index by expiry
    import psycopg

    app.counts()  # schema
    with psycopg.connect(app.database_url, autocommit=True) as connection:
        connection.execute(
            "INSERT INTO leased_jobs (task_name, queue_name, status, attempt, max_attempts, lease_seconds, "
            "lease_owner, lease_expires_at, finished_at) SELECT 't', 'default', "
            "CASE WHEN i %% 100 = 0 THEN 'running' ELSE 'done' END, 1, 3, 30, 'w', now() - interval '1 minute', "
            "now() FROM generate_series(1, %s) AS i", (HISTORY,))
        connection.execute("ANALYZE leased_jobs")
        (plan,) = connection.execute("EXPLAIN (FORMAT JSON) " + POSTGRES["fused_reclaim_expired"],
                                     {"steps": False, "spacing": 1.0, "silent_after": 15.0, "buried_prefix": None,
                                      "buried_how": None}).fetchone()
    nodes = list(_plan_nodes(plan[0]["Plan"]))
    whole_reads = [node for node in nodes  # of the running jobs: not a probe by id
                   if node.get("Index Name") == "leased_jobs_leases" and "(id =" not in node.get("Index Cond", "")
                   or node["Node Type"] == "Seq Scan" and node.get("Relation Name") == "leased_jobs"]
    assert len(whole_reads) == 1 and whole_reads[0]["Node Type"] != "Seq Scan", nodes
    assert app.backend.reclaim_expired() == HISTORY // 100


def _plan_nodes(node: dict):
    yield node
    for child in node.get("Plans", ()):
        yield from _plan_nodes(child)


def test_sqlite_finish_looks_each_job_up_by_id(app, backend_name):
    """Not by status: that would scan every running job once per end in the batch."""
    if backend_name != "sqlite":
        return  # PostgreSQL joins the batch to the primary key by itself
    app.counts()
    connection = app.backend._connection()
    plan = " ".join(row[3] for row in connection.execute("EXPLAIN QUERY PLAN " + SQLITE["finish"], {"ends": "[]"}))
    assert "INTEGER PRIMARY KEY" in plan and "leased_jobs_status" not in plan, plan


@contextmanager
def _mariadb_history(app, pending_every: int):
    """A cursor on HISTORY analysed rows, one in `pending_every` pending, the others done."""
    from conftest import _mariadb_connection
    from leased.backends.mariadb import driver

    app.counts()
    connection = _mariadb_connection(app.database_url)
    try:
        cursor = driver.dict_cursor(connection)
        cursor.execute(
            "INSERT INTO leased_jobs (task_name, queue_name, status, args, kwargs, max_attempts, lease_seconds, "
            f"run_after, created_at, finished_at) SELECT 't', 'default', IF(seq %% {pending_every} = 0, 'pending', "
            "'done'), '[]', '{}', 3, 30, 0, 0, 0 FROM seq_1_to_%s" % HISTORY)
        cursor.execute("ANALYZE TABLE leased_jobs")
        cursor.fetchall()
        yield cursor
    finally:
        connection.close()


def _mariadb_claim_plan(app) -> dict:
    """The claim's access to leased_jobs over HISTORY rows, one in a hundred pending: a range of the
    due index, whose generated column is NULL for every job not pending."""
    with _mariadb_history(app, 100) as cursor:
        cursor.execute("EXPLAIN " + MARIADB["claim_ids"], {"worker_id": "w", "task_names": json.dumps(["t"]),
                                                          "queue_names": None, "limit": 10})
        return next(row for row in cursor.fetchall() if row["table"] == "leased_jobs")


def test_mariadb_writes_by_id_look_each_id_up(app, backend_name):
    """A single-table UPDATE or DELETE with `id IN (SELECT ... JSON_TABLE)` is a scan on MariaDB (of every
    pending job per claim, of the whole table per prune batch): these are joined to the ids instead."""
    if backend_name != "mariadb":
        return  # SQLite and PostgreSQL look up `id IN (...)` by the primary key themselves
    with _mariadb_history(app, 2) as cursor:
        for name, params in [("take_leases", {"job_ids": "[2, 4]", "worker_id": "w"}), ("delete_jobs", {"ids": "[1, 3]"}),
                             ("cancel_jobs", {"job_ids": "[2]"}), ("retry_jobs", {"job_ids": "[1]"})]:
            cursor.execute("EXPLAIN " + MARIADB[name], params)
            (plan,) = [row for row in cursor.fetchall() if row["table"] == "job"]
            assert (plan["type"], plan["key"]) == ("eq_ref", "PRIMARY"), (name, plan)


def test_postgres_writes_of_a_batch_do_work_linear_in_the_batch(app, backend_name):
    """finish, renew and release under the generic plan a prepared statement settles on: with the
    statistics of a large history it guessed ten rows for the batch and re-joined it by scanning,
    a batch of a few hundred ends cost a second."""
    if backend_name != "postgres":
        return  # SQLite's and MariaDB's are checked above by their plans
    import psycopg

    batch = 300
    app.counts()
    with psycopg.connect(app.database_url, autocommit=True) as connection:
        connection.execute(
            "INSERT INTO leased_jobs (task_name, queue_name, status, attempt, max_attempts, lease_seconds, "
            "finished_at) SELECT 't', 'default', 'done', 1, 3, 30, now() FROM generate_series(1, %s)", (HISTORY,))
        connection.execute("INSERT INTO leased_attempts (job_id, attempt, worker_id, started_at, finished_at, outcome) "
                           "SELECT id, 1, 'old', now(), now(), 'done' FROM leased_jobs")
        connection.execute("ANALYZE leased_jobs")  # statistics that say nothing runs
        connection.execute("ANALYZE leased_attempts")
        ids = [row[0] for row in connection.execute(
            "INSERT INTO leased_jobs (task_name, queue_name, status, attempt, max_attempts, lease_seconds, "
            "lease_owner, lease_expires_at) SELECT 't', 'default', 'running', 1, 3, 30, 'w', now() + interval '1 hour' "
            "FROM generate_series(1, %s) RETURNING id", (batch,))]
        connection.execute("INSERT INTO leased_attempts (job_id, attempt, worker_id, started_at) "
                            "SELECT id, 1, 'w', now() FROM leased_jobs WHERE status = 'running'")
        connection.execute("SET plan_cache_mode = force_generic_plan")
        ends = {"job_ids": ids, "attempts": [1] * batch, "worker_ids": ["w"] * batch, "statuses": ["done"] * batch,
                "results": ["null"] * batch, "last_errors": [None] * batch, "retry_in_seconds": [0.0] * batch,
                "outcomes": ["done"] * batch, "error_types": [None] * batch, "error_messages": [None] * batch,
                "tracebacks": [None] * batch, "progress": [None] * batch, "handler_outlived_limits": [False] * batch,
                "counted_as": None}
        for name, params in [("fused_renew", {"job_ids": ids, "attempts": [1] * batch, "progress": [None] * batch,
                                              "worker_id": "w"}),
                             ("fused_release", {"job_ids": ids, "attempts": [1] * batch, "worker_id": "w",
                                                "outcome": "shutdown", "message": None}),
                             ("fused_finish", ends)]:
            work = _rows_through_generic_plan(connection, POSTGRES[name], params)
            assert work < 40 * batch, (name, work)


_PARAMETER_TYPES = {"job_ids": "bigint[]", "attempts": "int[]", "retry_in_seconds": "float8[]", "worker_id": "text",
                    "outcome": "text", "message": "text", "counted_as": "text", "handler_outlived_limits": "boolean[]"}


def _rows_through_generic_plan(connection, sql: str, params: dict) -> int:
    """Rows that passed through (or were thrown away by) every node of `sql`'s generic plan, run in a
    transaction that is rolled back: the database's own count of the work, not a timing."""
    import re

    import psycopg

    names: list[str] = []
    for name in re.findall(r"%\((\w+)\)s", sql):
        if name not in names:
            names.append(name)
    numbered = re.sub(r"%\((\w+)\)s", lambda match: f"${names.index(match.group(1)) + 1}", sql)
    connection.execute("BEGIN")
    try:
        types = [_PARAMETER_TYPES.get(name, "text[]") for name in names]
        connection.execute(f"PREPARE under_test ({', '.join(types)}) AS {numbered}".replace("%%", "%"))
        placeholders = ", ".join(f"%({name})s::{type_}" for name, type_ in zip(names, types))
        execute = psycopg.ClientCursor(connection).mogrify(f"EXECUTE under_test ({placeholders})", params)
        (plan,), = connection.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {execute}")
    finally:
        connection.execute("ROLLBACK")
        connection.execute("DEALLOCATE ALL")

    def rows(node: dict) -> int:
        own = node["Actual Rows"] * node["Actual Loops"] + node.get("Rows Removed by Join Filter", 0) \
            + node.get("Rows Removed by Filter", 0)
        return own + sum(rows(child) for child in node.get("Plans", []))

    return rows(plan[0]["Plan"])


ACTIVE_INDEXES = ("leased_jobs_due", "leased_jobs_queue_due", "leased_jobs_keyed_due", "leased_jobs_leases",
                  "leased_jobs_waiting", "leased_jobs_fair_due")


def test_the_overviews_counts_read_no_finished_history(app, backend_name):
    """The dashboard's and /metrics' counts (leased.counts) read index ranges of the active and the
    failed or cancelled jobs, and the sample by primary key; the oldest due job reads the due set:
    never every row of the table. The last hour's finishes and the chart read no job at all, only
    the counts kept as jobs finish (migration 0011)."""
    from leased.counts import sample_ids

    app.counts()
    statuses = ("CASE WHEN i %% 100 = 0 THEN 'pending' WHEN i %% 100 = 1 THEN 'running' "
                "WHEN i %% 200 = 2 THEN 'failed' ELSE 'done' END")
    params = {"count_id_range": {}, "count_active": {}, "count_capped": {"cap": 10_001},
              "count_split": {"failed": True, "cancelled": True},
              "count_sample": {"ids": sample_ids(1, HISTORY, HISTORY // 500)},  # 2,000 of a million, scaled
              "oldest_due": {}}
    counted = {"finished_since": {"window_seconds": 3600.0}, "throughput": {"window_seconds": 3600.0, "by_task": True}}
    if backend_name == "postgres":
        import psycopg

        with psycopg.connect(app.database_url, autocommit=True) as connection:
            connection.execute(
                "INSERT INTO leased_jobs (task_name, queue_name, status, max_attempts, lease_seconds, finished_at, "
                f"lease_expires_at) SELECT 't', 'q' || (i %% 5), {statuses}, 3, 30, now() - i * interval '1 minute', now() "
                "FROM generate_series(1, %s) AS i", (HISTORY,))
            connection.execute("ANALYZE leased_jobs")
            for name, values in params.items():
                (plan,) = connection.execute("EXPLAIN (FORMAT JSON) " + POSTGRES[name], values).fetchone()[0]
                scans = list(_postgres_scans(plan["Plan"], HISTORY))
                assert scans and all(kind != "Seq Scan" and rows <= HISTORY // 50 for kind, rows in scans), (name, scans)
            for name, values in counted.items():
                (plan,) = connection.execute("EXPLAIN (FORMAT JSON) " + POSTGRES[name], values).fetchone()[0]
                assert not list(_postgres_scans(plan["Plan"], HISTORY)), (name, plan)
    elif backend_name == "sqlite":
        connection = app.backend._connection()
        connection.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
            "INSERT INTO leased_jobs (task_name, queue_name, status, max_attempts, lease_seconds, run_after, "
            f"created_at, finished_at, lease_expires_at) SELECT 't', 'q' || (i % 5), {statuses.replace('%%', '%')}, "
            "3, 30, 0, 0, 0, 0 FROM n", (HISTORY,))
        connection.execute("ANALYZE")
        every_row = _sqlite_work(connection, SQLITE["counts"], {})
        for name, values in params.items():
            values = {**values, "ids": json.dumps(values["ids"])} if "ids" in values else values
            plan = [row[3] for row in connection.execute("EXPLAIN QUERY PLAN " + SQLITE[name], values)]
            reads = [step for step in plan if re.match(r"(SCAN|SEARCH) (leased_jobs|j)\b", step)]
            # A SEARCH is a range of an index; a SCAN only of a partial one that holds active jobs alone.
            assert reads and all(step.startswith("SEARCH") or step.endswith(ACTIVE_INDEXES) for step in reads), (
                name, plan)
            # And the range is narrow: a search on status = 'done' would be a SEARCH too.
            assert _sqlite_work(connection, SQLITE[name], values) < every_row / 20, (name, plan)
        for name, values in counted.items():
            plan = [row[3] for row in connection.execute("EXPLAIN QUERY PLAN " + SQLITE[name], values)]
            assert not [step for step in plan if "leased_jobs" in step], (name, plan)
    else:
        with _mariadb_history(app, 100) as cursor:
            for name, values in params.items():
                values = {**values, "ids": json.dumps(values["ids"])} if "ids" in values else values
                cursor.execute("EXPLAIN " + MARIADB[name], values)
                for step in cursor.fetchall():
                    if step["table"] in ("leased_jobs", "j"):
                        assert step["type"] != "ALL" and int(step["rows"]) <= HISTORY // 50, (name, step)
                        if name == "count_split":  # failed and cancelled by queue: no row read (0009)
                            assert "Using index" in [part.strip() for part in step["Extra"].split(";")], step
            for name, values in counted.items():
                cursor.execute("EXPLAIN " + MARIADB[name], values)
                assert not [step for step in cursor.fetchall() if step["table"] in ("leased_jobs", "j")], name


def _postgres_scans(node: dict, limit: float):
    """(node type, rows it is expected to yield under the nearest Limit above it) of each scan of leased_jobs."""
    if node["Node Type"] == "Limit":
        limit = min(limit, node["Plan Rows"])
    if node.get("Relation Name") == "leased_jobs":
        yield node["Node Type"], min(limit, node["Plan Rows"])
    for child in node.get("Plans", ()):
        yield from _postgres_scans(child, limit)


def _sqlite_work(connection, sql: str, params: dict) -> int:
    """How much a query does, in thousands of SQLite's virtual machine steps: a count of work, not a time."""
    steps = []
    connection.set_progress_handler(lambda: steps.append(1), 1000)
    try:
        connection.execute(sql, params).fetchall()
    finally:
        connection.set_progress_handler(None, 1000)
    return len(steps)


PAGES = [  # filters that two indexes each narrow: status with queue, status with task
    {"status": "done", "queue_name": "q1", "task_name": None},
    {"status": "failed", "queue_name": None, "task_name": "t3"},
    {"status": "done", "queue_name": "q3", "task_name": "t2"},
    # A status as rare as pending (one job in 100, all of task t3 in queue q2), listed and counted:
    # SQLite walked the table in id order for it (its planner does not see the status index through
    # `:status IS NULL OR status = :status`), and PostgreSQL has no index of leased_jobs that holds
    # every pending job (migration 0019).
    {"status": "pending", "queue_name": None, "task_name": None},
    {"status": "pending", "queue_name": "q2", "task_name": "t3"},
]
PENDING_EVERY = 100
STATUSES = "CASE WHEN {i} {percent} 10 = 3 THEN 'failed' WHEN {i} {percent} 100 = 7 THEN 'pending' ELSE 'done' END"


def _reads(where: dict) -> tuple[str, ...]:
    """The job list both ways, and for pending jobs the count too (a count of done jobs reads them all)."""
    return ("list_jobs_newest", "list_jobs_oldest") + (("count_jobs",) if where["status"] == "pending" else ())


def test_a_filtered_page_of_jobs_reads_about_a_page(app, backend_name):
    """The dashboard's job list, filtered two ways, walks an index in id order and stops at its page:
    it does not read and sort every match (MariaDB intersected two indexes and sorted 200,000 rows
    for a page at a million jobs). Pending jobs, listed or counted, are read from what holds them."""
    app.counts()
    history = ("INSERT INTO leased_jobs (task_name, queue_name, status, args, kwargs, max_attempts, lease_seconds, "
               "run_after, created_at, finished_at) SELECT {task}, {queue}, {status}, '[]', '{{}}', 3, 30, {t}, {t}, {t} "
               "FROM {rows}")
    page = {"search": None, "search_id": None, "before_id": None, "after_id": None, "limit": 50}
    if backend_name == "mariadb":
        from conftest import _mariadb_connection
        from leased.backends.mariadb import driver

        connection = _mariadb_connection(app.database_url)
        try:
            cursor = driver.dict_cursor(connection)
            cursor.execute(history.format(task="concat('t', seq %% 4)", queue="concat('q', seq %% 5)",
                                          status=STATUSES.format(i="seq", percent="%%"), t="0",
                                          rows="seq_1_to_%s") % HISTORY)
            cursor.execute("ANALYZE TABLE leased_jobs")
            cursor.fetchall()
            for where in PAGES:
                for query in _reads(where):
                    cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read%%'")
                    before = sum(int(row["Value"]) for row in cursor.fetchall())
                    cursor.execute(MARIADB[query], {**page, **where})
                    _assert_found(query, cursor.fetchall())
                    cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read%%'")
                    reads = sum(int(row["Value"]) for row in cursor.fetchall()) - before
                    assert reads <= 50 * 40, (query, where, reads)  # the filters pass one row in 20 or more
        finally:
            connection.close()
    elif backend_name == "sqlite":
        connection = app.backend._connection()
        connection.execute(history.format(
            task="'t' || (i % 4)", queue="'q' || (i % 5)", status=STATUSES.format(i="i", percent="%"),
            t="0", rows="(WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) SELECT i FROM n)"),
            (HISTORY,))
        connection.execute("ANALYZE")
        every_row = _sqlite_work(connection, SQLITE["counts"], {})
        for where in PAGES:
            for query in _reads(where):
                _assert_found(query, [dict(row) for row in connection.execute(SQLITE[query], {**page, **where})])
                # One row in 20 passes the filters: a page of 50 reads about 1,000 of HISTORY.
                assert _sqlite_work(connection, SQLITE[query], {**page, **where}) < every_row / 10, (query, where)
    else:
        import psycopg
        from psycopg.rows import dict_row

        with psycopg.connect(app.database_url, autocommit=True) as connection:
            connection.execute(history.format(
                task="'t' || (i %% 4)", queue="'q' || (i %% 5)",
                status=STATUSES.format(i="i", percent="%%"), t="now()",
                rows="generate_series(1, %s) AS i").replace("'{}'", "'{}'"), (HISTORY,))
            connection.execute("ANALYZE leased_jobs")
            for where in PAGES:
                for query in _reads(where):
                    (plan,) = connection.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + POSTGRES[query],
                                                 {**page, **where}).fetchone()[0]
                    read = sum(rows for rows in _postgres_rows_read(plan["Plan"]))
                    assert read <= 50 * 40, (query, where, read)
                    _assert_found(query, connection.cursor(row_factory=dict_row).execute(
                        POSTGRES[query], {**page, **where}).fetchall())


def _assert_found(query: str, rows: list[dict]) -> None:
    """A page of 50, or the count of every pending job."""
    if query == "count_jobs":
        assert [row["n"] for row in rows] == [HISTORY // PENDING_EVERY], rows
    else:
        assert len(rows) == 50, (query, len(rows))


def _postgres_rows_read(node: dict):
    """Rows each scan of leased_jobs returned or filtered out, in an EXPLAIN ANALYZE."""
    if node.get("Relation Name") == "leased_jobs":
        yield node["Actual Rows"] + node.get("Rows Removed by Filter", 0) + node.get("Rows Removed by Index Recheck", 0)
    for child in node.get("Plans", ()):
        yield from _postgres_rows_read(child)


def test_counting_failed_jobs_by_queue_reads_only_failed_jobs(app, backend_name):
    """With statistics that saw no failed job, SQLite scanned a whole index for count_split's GROUP
    BY (800 ms at ten million finished jobs); it reads one status's range of (status, queue_name)."""
    if backend_name != "sqlite":
        return  # MariaDB's plan is checked above; PostgreSQL reads its partial failed-or-cancelled index
    app.counts()
    connection = app.backend._connection()
    connection.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
        "INSERT INTO leased_jobs (task_name, queue_name, status, max_attempts, lease_seconds, run_after, "
        "created_at, finished_at) SELECT 't', 'q' || (i % 5), 'done', 3, 30, 0, 0, 0 FROM n", (HISTORY,))
    connection.execute("ANALYZE")
    plan = [row[3] for row in connection.execute("EXPLAIN QUERY PLAN " + SQLITE["count_split"],
                                                 {"failed": True, "cancelled": True})]
    reads = [step for step in plan if "leased_jobs" in step]
    assert reads and all(step.startswith("SEARCH leased_jobs USING COVERING INDEX leased_jobs_status_queue")
                         for step in reads), plan


def test_postgres_sessions_never_compile_a_statement(app, backend_name):
    """Where the planner cannot know a bound (a window from leased_now()) it guesses a third of the
    table, and past jit_above_cost PostgreSQL compiles the statement first: 300 ms for the
    dashboard's chart at ten million jobs, whose reads took 10 ms. leased's sessions turn JIT off."""
    if backend_name != "postgres":
        return  # no JIT elsewhere
    app.counts()
    for for_claims in (False, True):
        with app.backend.connections.connection(for_claims=for_claims) as connection:
            assert connection.execute("SHOW jit").fetchone()["jit"] == "off"


def test_postgres_renewals_change_no_indexed_column(app, backend_name):
    """Migration 0012: a renewal rewrites only lease_expires_at (and progress, migration 0015), so it
    may be a HOT update (no index entry, a dead version pruned in its page) only while no index's
    key, expression or predicate reads those columns; and leased_jobs keeps room on its pages for
    such updates (fillfactor)."""
    if backend_name != "postgres":
        return  # HOT is PostgreSQL's; InnoDB and SQLite rewrite only the indexes whose columns change
    import psycopg

    app.counts()
    with psycopg.connect(app.database_url) as connection:
        reading = [connection.execute(
            "SELECT i.indexrelid::regclass::text FROM pg_index AS i "
            "WHERE i.indrelid = 'leased_jobs'::regclass AND (EXISTS (SELECT FROM pg_attribute AS a "
            "WHERE a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) AND a.attname = %(column)s) "
            "OR pg_get_expr(i.indpred, i.indrelid) LIKE '%%' || %(column)s || '%%' "
            "OR pg_get_expr(i.indexprs, i.indrelid) LIKE '%%' || %(column)s || '%%')", {"column": column}).fetchall()
            for column in ("lease_expires_at", "progress")]
        options = connection.execute("SELECT reloptions FROM pg_class WHERE oid = 'leased_jobs'::regclass").fetchone()[0]
    assert reading == [[], []] and "fillfactor=90" in (options or []), (reading, options)
