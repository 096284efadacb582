-- Named queries of the SQLite backend. leased_now() is the connection's clock in epoch seconds;
-- lease lists are JSON arrays of [job_id, attempt] pairs.

-- name: insert_jobs
-- A batch in one statement. Each job is a JSON array [task_name, queue_name, args, kwargs, priority,
-- max_attempts, lease_seconds, run_at, delay_seconds, idempotency_key, timeout_seconds,
-- concurrency_key, key_concurrency, key_rate_count, key_rate_seconds, status, workflow_id, isolation,
-- max_crashes, trace_context],
-- and the batch one array of them.
-- A job whose key a pending job holds is skipped. Ids follow the batch's order, which is how
-- the caller matches rows to jobs (RETURNING's own order is unspecified): the rows are inserted
-- one at a time in the SELECT's order, and AUTOINCREMENT gives each an id above any before it.
-- One clock reading for the batch, as now() is one for a transaction on PostgreSQL. The statement
-- starts with INSERT, which is how Python's sqlite3 knows to open the caller's transaction first.
INSERT INTO leased_jobs (task_name, queue_name, args, kwargs, priority, max_attempts, lease_seconds,
                         run_after, created_at, idempotency_key, timeout_seconds, concurrency_key,
                         key_concurrency, key_rate_count, key_rate_seconds, status, workflow_id, isolation,
                         max_crashes, trace_context)
WITH clock AS MATERIALIZED (SELECT leased_now() AS now)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]'), json_extract(value, '$[4]'), json_extract(value, '$[5]'),
       json_extract(value, '$[6]'), coalesce(json_extract(value, '$[7]'), clock.now + json_extract(value, '$[8]')),
       clock.now, json_extract(value, '$[9]'), json_extract(value, '$[10]'), json_extract(value, '$[11]'),
       json_extract(value, '$[12]'), json_extract(value, '$[13]'), json_extract(value, '$[14]'),
       json_extract(value, '$[15]'), json_extract(value, '$[16]'), json_extract(value, '$[17]'),
       json_extract(value, '$[18]'), json_extract(value, '$[19]')
FROM json_each(:jobs), clock
WHERE true  -- without a WHERE, SQLite would read ON CONFLICT as the join's constraint
ORDER BY key
ON CONFLICT (idempotency_key) WHERE status = 'pending' AND attempt = 0 AND idempotency_key IS NOT NULL
DO NOTHING
RETURNING id, run_after, created_at, idempotency_key;

-- name: insert_job
-- One job, as insert_jobs would insert it, without a batch to build and parse, nor rows to sort
-- (see sql/enqueue.py, insert_statement): what most enqueues are. The clock is read once, so that
-- a job due at once has run_after = created_at, as on PostgreSQL (a deterministic function may
-- still be called twice in one statement).
INSERT INTO leased_jobs (task_name, queue_name, args, kwargs, priority, max_attempts, lease_seconds,
                         run_after, created_at, idempotency_key, timeout_seconds, concurrency_key,
                         key_concurrency, key_rate_count, key_rate_seconds, status, workflow_id, isolation,
                         max_crashes, trace_context)
SELECT :task_name, :queue_name, :args_json, :kwargs_json, :priority, :max_attempts, :lease_seconds,
       coalesce(:run_at, clock.now + :delay_seconds), clock.now, :idempotency_key, :timeout_seconds,
       :concurrency_key, :key_concurrency, :key_rate_count, :key_rate_seconds, :status, :workflow_id,
       :isolation, :max_crashes, :trace_context
FROM (SELECT leased_now() AS now) AS clock
WHERE true  -- without a WHERE, SQLite would read ON CONFLICT as the join's constraint
ON CONFLICT (idempotency_key) WHERE status = 'pending' AND attempt = 0 AND idempotency_key IS NOT NULL
DO NOTHING
RETURNING id, run_after, created_at, idempotency_key;

-- name: pending_with_key
SELECT * FROM leased_jobs
WHERE idempotency_key = :idempotency_key AND status = 'pending' AND attempt = 0;

-- name: claim
-- Jobs without a key in queues without a limit: the only claim while no limit is in use (see
-- limits_in_use); claim_limited takes the others.
UPDATE leased_jobs
SET status = 'running', attempt = attempt + 1, lease_owner = :worker_id,
    lease_expires_at = leased_now() + lease_seconds, attempt_started_at = leased_now()
WHERE id IN (
    -- The planner would rather use leased_jobs_status and sort every pending row; the due index
    -- is already in claim order, so the scan stops after `limit` matches.
    SELECT id FROM leased_jobs INDEXED BY leased_jobs_due
    WHERE status = 'pending' AND concurrency_key IS NULL AND run_after <= leased_now()
      AND task_name IN (SELECT value FROM json_each(:task_names))
      AND (:queue_names IS NULL OR queue_name IN (SELECT value FROM json_each(:queue_names)))
      AND queue_name NOT IN (SELECT queue_name FROM leased_queue_limits)
      AND queue_name NOT IN (SELECT queue_name FROM leased_queues WHERE paused_at IS NOT NULL)
    ORDER BY priority DESC, run_after, id
    LIMIT :limit
)
RETURNING *;

-- name: renew
UPDATE leased_jobs
SET lease_expires_at = leased_now() + lease_seconds
WHERE status = 'running' AND lease_owner = :worker_id AND lease_expires_at > leased_now()
  AND (id, attempt) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:leases));

-- name: record_progress
-- With a renewal, in its transaction: how far each attempt got (TaskContext.progress), as its
-- handler last said since the renewal before. :progress is a JSON array of [job_id, attempt, progress].
UPDATE leased_jobs AS job
SET progress = reported.value ->> '$[2]'
FROM json_each(:progress) AS reported
WHERE job.id = reported.value ->> '$[0]' AND job.attempt = reported.value ->> '$[1]'
  AND job.lease_owner = :worker_id AND +job.status = 'running';

-- name: held_leases
-- Of the given leases, those the worker holds unexpired: after renew, the ones it renewed.
SELECT id, attempt FROM leased_jobs
WHERE status = 'running' AND lease_owner = :worker_id AND lease_expires_at > leased_now()
  AND (id, attempt) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:leases));

-- name: lease_fence
-- A transactional handler's end (store.finish_in), in the handler's own write transaction: the
-- lease still held and not expired by the database's clock. No other writer runs meanwhile.
SELECT id, attempt, queue_name, task_name, workflow_id FROM leased_jobs
WHERE id = :job_id AND attempt = :attempt AND lease_owner = :worker_id AND status = 'running'
  AND lease_expires_at > leased_now();

-- name: leases_to_finish
-- Of the given leases, those the worker still holds, expired or not (a lease is lost once another
-- claim or a reclaim takes the job, or a user cancels it): the ends that finish may write.
SELECT id, attempt, queue_name, task_name, workflow_id FROM leased_jobs
WHERE status = 'running' AND lease_owner = :worker_id
  AND (id, attempt) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:leases));

-- name: finish
-- :ends is a JSON array of [job_id, attempt, worker_id, status, result, last_error, retry_in_seconds,
-- progress, outcome]; each end is fenced on its lease, so one whose lease was lost matches nothing.
-- An attempt whose process died (outcome crashed) adds to the job's crashes (migration 0023).
WITH ends AS (
    SELECT value ->> '$[0]' AS job_id, value ->> '$[1]' AS attempt, value ->> '$[2]' AS worker_id,
           value ->> '$[3]' AS status, value ->> '$[4]' AS result, value ->> '$[5]' AS last_error,
           value ->> '$[6]' AS retry_in_seconds, value ->> '$[7]' AS progress, value ->> '$[8]' AS outcome
    FROM json_each(:ends)
)
UPDATE leased_jobs AS job
SET status = ends.status,
    result = ends.result,
    last_error = coalesce(ends.last_error, job.last_error),
    finished_at = CASE WHEN ends.status = 'pending' THEN NULL ELSE leased_now() END,
    run_after = CASE WHEN ends.status = 'pending' THEN leased_now() + ends.retry_in_seconds ELSE job.run_after END,
    lease_owner = NULL,
    lease_expires_at = NULL,
    progress = coalesce(ends.progress, job.progress),
    crashes = job.crashes + (ends.outcome IS 'crashed')
FROM ends
-- Unary + keeps the status index out: the planner would scan every running job for each end.
WHERE job.id = ends.job_id AND job.attempt = ends.attempt AND job.lease_owner = ends.worker_id
  AND +job.status = 'running';

-- name: count_finished
-- Jobs that finished (done or failed), counted by minute in their worker's own rows (migration
-- 0011), in the transaction that finished them (finish, or the reclaim that fails a job whose last
-- lease expired). :counts is a JSON array of [queue_name, task_name, worker_id, done, failed].
INSERT INTO leased_throughput (minute, queue_name, task_name, worker_id, done, failed)
SELECT CAST(leased_now() / 60 AS INTEGER) * 60, value ->> '$[0]', value ->> '$[1]', value ->> '$[2]',
       value ->> '$[3]', value ->> '$[4]'
FROM json_each(:counts) WHERE true  -- WHERE: without it SQLite would read ON CONFLICT as a join's ON
ON CONFLICT (minute, queue_name, task_name, worker_id) DO UPDATE
SET done = done + excluded.done, failed = failed + excluded.failed;

-- name: record_attempts
-- An attempt's record, written once as it ends, from what the claim wrote in the job row (its
-- worker and start); run before the job row's own end (finish, release, cancel, the reclaim of an
-- expired lease), in the same transaction.
-- :ends is a JSON array of [job_id, attempt, worker_id, outcome, error_type, error_message, traceback,
-- progress, handler_outlived_limit (0 or 1; absent: not known), trace_context (the attempt's span;
-- absent: untraced)]; each is fenced on its lease as
-- finish is, so a worker that lost it writes no outcome. A record that an older version opened at
-- claim is closed in place.
WITH ends AS (
    SELECT value ->> '$[0]' AS job_id, value ->> '$[1]' AS attempt, value ->> '$[2]' AS worker_id,
           value ->> '$[3]' AS outcome, value ->> '$[4]' AS error_type, value ->> '$[5]' AS error_message,
           value ->> '$[6]' AS traceback, value ->> '$[7]' AS progress, value ->> '$[8]' AS handler_outlived_limit,
           value ->> '$[9]' AS trace_context
    FROM json_each(:ends)
)
INSERT INTO leased_attempts (job_id, attempt, worker_id, started_at, finished_at, outcome, error_type,
                             error_message, traceback, progress, handler_outlived_limit, trace_context)
SELECT job.id, job.attempt, job.lease_owner, coalesce(job.attempt_started_at, leased_now()), leased_now(),
       ends.outcome, ends.error_type, ends.error_message, ends.traceback,
       -- untold (a release, an expiry), the attempt's latest report, as its last renewal wrote it;
       -- its attempt matched in the text Progress.to_json writes: ->> raises on a row that is not JSON
       coalesce(ends.progress, CASE WHEN job.progress LIKE '%"attempt": ' || job.attempt || '}' THEN job.progress END),
       ends.handler_outlived_limit, ends.trace_context
FROM ends JOIN leased_jobs AS job ON job.id = ends.job_id
WHERE job.attempt = ends.attempt AND job.lease_owner = ends.worker_id AND +job.status = 'running'
ON CONFLICT (job_id, attempt) DO UPDATE
SET finished_at = excluded.finished_at, outcome = excluded.outcome, error_type = excluded.error_type,
    error_message = excluded.error_message, traceback = excluded.traceback, progress = excluded.progress,
    handler_outlived_limit = excluded.handler_outlived_limit, trace_context = excluded.trace_context
WHERE outcome IS NULL;

-- name: release
UPDATE leased_jobs
SET status = 'pending', run_after = leased_now(), lease_owner = NULL, lease_expires_at = NULL
WHERE status = 'running' AND lease_owner = :worker_id
  AND (id, attempt) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:leases));

-- name: expired_ids
-- Read once, so that recording the attempts (record_attempts, before the reclaim clears the lease
-- they are read from) and reclaiming the jobs take the same set.
-- gone: the lease's worker has a row, silent for :silent_after seconds or more (or marked so when
-- its supervisor saw it die: bury_worker); sql/store.py, _reclaim, reads it as a crash. A worker
-- without a row (one that never registered: a test's, a script's) is not known to be dead.
SELECT id, attempt, lease_owner, queue_name, task_name, workflow_id, max_attempts, crashes, max_crashes,
       EXISTS (SELECT 1 FROM leased_workers AS w
               WHERE w.id = job.lease_owner AND w.last_seen_at <= leased_now() - :silent_after) AS gone
FROM leased_jobs AS job WHERE status = 'running' AND lease_expires_at <= leased_now();

-- name: reclaim_expired
-- The job's last error is its expired attempt's, just recorded; an attempt recorded as crashed
-- adds to its crashes, and the crash that reaches max_crashes fails it as a poison job.
UPDATE leased_jobs AS job
SET status = CASE WHEN job.attempt >= job.max_attempts
                       OR (a.outcome IS 'crashed' AND job.crashes + 1 >= job.max_crashes) THEN 'failed'
                  ELSE 'pending' END,
    finished_at = CASE WHEN job.attempt >= job.max_attempts
                            OR (a.outcome IS 'crashed' AND job.crashes + 1 >= job.max_crashes) THEN leased_now() END,
    last_error = CASE WHEN a.outcome IS 'crashed' AND job.crashes + 1 >= job.max_crashes
                      THEN 'quarantined after ' || (job.crashes + 1) || CASE WHEN job.crashes = 0 THEN ' crash: ' ELSE ' crashes: ' END
                           || a.error_message
                      ELSE a.error_message END,
    crashes = job.crashes + (a.outcome IS 'crashed'),
    run_after = leased_now(),
    lease_owner = NULL,
    lease_expires_at = NULL
FROM leased_attempts AS a
WHERE a.job_id = job.id AND a.attempt = job.attempt
  AND job.id IN (SELECT value FROM json_each(:job_ids)) AND job.status = 'running';

-- name: get_job
SELECT * FROM leased_jobs WHERE id = :job_id;

-- name: get_history
SELECT * FROM leased_attempts WHERE job_id = :job_id ORDER BY attempt;

-- name: list_jobs_newest
-- :worker_id: jobs the worker holds now, or ran an attempt of (no index holds attempts by worker,
-- so that filter reads the attempts once; without it the condition is true and reads nothing).
-- The status filter is its own branch: SQLite does not look past `:status IS NULL OR status =
-- :status` to the (status, id) index, and walked the whole table in id order for a status as rare
-- as pending (54 ms for a page at a million jobs, 0.6 ms through the index). The branches merge in
-- id order, and the one whose status condition is false reads nothing.
WITH filtered AS NOT MATERIALIZED (
    SELECT * FROM leased_jobs
    WHERE (:queue_name IS NULL OR queue_name = :queue_name)
      AND (:task_name IS NULL OR task_name = :task_name)
      AND (:search IS NULL OR id = :search_id OR idempotency_key = :search)
      AND (:before_id IS NULL OR id < :before_id)
      AND (:worker_id IS NULL OR lease_owner = :worker_id
           OR id IN (SELECT job_id FROM leased_attempts WHERE worker_id = :worker_id)))
SELECT * FROM filtered WHERE status = :status
UNION ALL
SELECT * FROM filtered WHERE :status IS NULL
ORDER BY id DESC
LIMIT :limit;

-- name: list_jobs_oldest
-- Two branches, as in list_jobs_newest.
WITH filtered AS NOT MATERIALIZED (
    SELECT * FROM leased_jobs
    WHERE (:queue_name IS NULL OR queue_name = :queue_name)
      AND (:task_name IS NULL OR task_name = :task_name)
      AND (:search IS NULL OR id = :search_id OR idempotency_key = :search)
      AND (:after_id IS NULL OR id > :after_id)
      AND (:worker_id IS NULL OR lease_owner = :worker_id
           OR id IN (SELECT job_id FROM leased_attempts WHERE worker_id = :worker_id)))
SELECT * FROM filtered WHERE status = :status
UNION ALL
SELECT * FROM filtered WHERE :status IS NULL
ORDER BY id
LIMIT :limit;

-- name: counts
-- Every row, exactly: `Leased.counts()`, for scripts and tests. The dashboard reads the cheap ones below.
SELECT queue_name, status, count(*) AS n FROM leased_jobs GROUP BY queue_name, status;

-- Cheap counts (leased/counts.py), read in one snapshot. None of them reads the finished history.
-- name: count_id_range
-- Two subqueries: SQLite reads one end of the key for a lone min() or max(), but scans for both.
SELECT (SELECT min(id) FROM leased_jobs) AS low, (SELECT max(id) FROM leased_jobs) AS high;

-- name: count_active
-- Exact, each part through a partial index of the claim or the reclaim: the due set and the leases
-- (named: for the GROUP BY, SQLite would rather walk a full index in queue order).
SELECT queue_name, 'pending' AS status, count(*) AS n FROM leased_jobs INDEXED BY leased_jobs_queue_due
WHERE status = 'pending' AND concurrency_key IS NULL GROUP BY queue_name
UNION ALL
SELECT queue_name, 'pending', count(*) FROM leased_jobs INDEXED BY leased_jobs_keyed_due
WHERE status = 'pending' AND concurrency_key IS NOT NULL GROUP BY queue_name
UNION ALL
SELECT queue_name, 'running', count(*) FROM leased_jobs INDEXED BY leased_jobs_leases
WHERE status = 'running' GROUP BY queue_name
UNION ALL
SELECT queue_name, 'waiting', count(*) FROM leased_jobs INDEXED BY leased_jobs_waiting
WHERE status = 'waiting' GROUP BY queue_name
UNION ALL
SELECT queue_name, 'sleeping', count(*) FROM leased_jobs INDEXED BY leased_jobs_status_queue
WHERE status = 'sleeping' GROUP BY queue_name;

-- name: recent_quarantined
-- Poison jobs (migration 0023) among the latest failed jobs, by queue: a bounded read through the
-- status index, for the leased_jobs_quarantined gauge.
SELECT queue_name, count(*) AS n
FROM (SELECT queue_name, crashes, max_crashes FROM leased_jobs WHERE status = 'failed' ORDER BY id DESC
      LIMIT :recent) AS failed
WHERE crashes >= max_crashes
GROUP BY queue_name;

-- name: count_capped
-- Failed and cancelled jobs counted up to `cap` each: an index range, no row read. A status under
-- the cap is then split by queue (count_split); one at the cap is estimated by the caller.
SELECT 'failed' AS status, count(*) AS n FROM (SELECT 1 FROM leased_jobs WHERE status = 'failed' LIMIT :cap)
UNION ALL
SELECT 'cancelled', count(*) FROM (SELECT 1 FROM leased_jobs WHERE status = 'cancelled' LIMIT :cap);

-- name: count_split
-- Failed and cancelled per queue, each only if its flag is set (it was under the cap): a false
-- flag is a constant condition, so that part reads nothing.
-- The index named: with statistics that saw few failed jobs, SQLite scanned a whole index for the
-- GROUP BY instead (migration 0009).
SELECT queue_name, 'failed' AS status, count(*) AS n FROM leased_jobs INDEXED BY leased_jobs_status_queue
WHERE status = 'failed' AND :failed GROUP BY queue_name
UNION ALL
SELECT queue_name, 'cancelled', count(*) FROM leased_jobs INDEXED BY leased_jobs_status_queue
WHERE status = 'cancelled' AND :cancelled GROUP BY queue_name;

-- name: count_sample
-- The jobs at the probed ids, by primary key; an id with no job (pruned, deleted) is a miss.
SELECT j.queue_name, j.status, count(*) AS n
FROM json_each(:ids) AS probe JOIN leased_jobs AS j ON j.id = probe.value
GROUP BY j.queue_name, j.status;

-- name: lock_for_retry
SELECT id, queue_name, workflow_id FROM leased_jobs WHERE id = :job_id AND status IN ('failed', 'cancelled');

-- name: retry
UPDATE leased_jobs
SET status = 'pending', run_after = leased_now(), finished_at = NULL,
    max_attempts = max(max_attempts, attempt + 1), crashes = min(crashes, max_crashes - 1)
WHERE id = :job_id AND status IN ('failed', 'cancelled');

-- name: cancel
UPDATE leased_jobs
SET status = 'cancelled', finished_at = leased_now(), lease_owner = NULL, lease_expires_at = NULL
WHERE id = :job_id AND status IN ('pending', 'running', 'waiting', 'sleeping');

-- name: lock_for_cancel
-- A running job's attempt and worker come along: its record is written before cancel clears them.
-- (The write transaction holds SQLite's one write lock: nothing changes the row meanwhile.)
SELECT id, attempt, lease_owner, status, workflow_id FROM leased_jobs
WHERE id = :job_id AND status IN ('pending', 'running', 'waiting', 'sleeping');

-- name: oldest_due
-- Through the due set's partial indexes, as count_active: SQLite would rather skip-scan a full index.
SELECT queue_name, leased_now() - min(run_after) AS seconds FROM (
    SELECT queue_name, run_after FROM leased_jobs INDEXED BY leased_jobs_queue_due
    WHERE status = 'pending' AND concurrency_key IS NULL AND run_after <= leased_now()
    UNION ALL
    SELECT queue_name, run_after FROM leased_jobs INDEXED BY leased_jobs_keyed_due
    WHERE status = 'pending' AND concurrency_key IS NOT NULL AND run_after <= leased_now()
)
GROUP BY queue_name;

-- name: finished_since
-- Done and failed per queue since the start of the minute `window_seconds` ago, from the counts
-- kept as jobs finish (migration 0011): the same minutes throughput draws.
SELECT queue_name, sum(done) AS done, sum(failed) AS failed FROM leased_throughput
WHERE minute >= CAST((leased_now() - :window_seconds) / 60 AS INTEGER) * 60
GROUP BY queue_name;

-- name: failed_to_retry
SELECT id, queue_name, workflow_id FROM leased_jobs
WHERE status = 'failed'
  AND (:task_name IS NULL OR task_name = :task_name)
  AND (:queue_name IS NULL OR queue_name = :queue_name);

-- name: retry_jobs
UPDATE leased_jobs
SET status = 'pending', run_after = leased_now(), finished_at = NULL,
    max_attempts = max(max_attempts, attempt + 1), crashes = min(crashes, max_crashes - 1)
WHERE id IN (SELECT value FROM json_each(:job_ids)) AND status = 'failed';

-- name: task_names
-- Distinct names by skipping through an index: a few lookups, not a scan of every row.
WITH RECURSIVE names (name) AS (
    SELECT min(task_name) FROM leased_jobs
    UNION ALL
    SELECT (SELECT min(task_name) FROM leased_jobs WHERE task_name > names.name) FROM names WHERE name IS NOT NULL
)
SELECT name FROM names WHERE name IS NOT NULL;

-- name: queue_names
WITH RECURSIVE names (name) AS (
    SELECT min(queue_name) FROM leased_jobs
    UNION ALL
    SELECT (SELECT min(queue_name) FROM leased_jobs WHERE queue_name > names.name) FROM names WHERE name IS NOT NULL
)
SELECT name FROM names WHERE name IS NOT NULL;

-- name: register_worker
INSERT INTO leased_workers (id, host, pid, concurrency, queues, tasks, wake_port, stuck_handlers, children,
                            task_signatures, started_at, last_seen_at)
VALUES (:id, :host, :pid, :concurrency, :queues, :tasks, :wake_port, :stuck_handlers, :children, :task_signatures,
        leased_now(), leased_now())
ON CONFLICT (id) DO UPDATE SET last_seen_at = leased_now(), stuck_handlers = excluded.stuck_handlers,
                               children = excluded.children;

-- name: wake_ports
SELECT wake_port FROM leased_workers
WHERE wake_port IS NOT NULL AND last_seen_at > leased_now() - :silent_after;

-- name: bury_workers
-- Workers their supervisor saw die (bury_workers): silent from now on, as if for :silent_after
-- seconds, so that the reclaim reads their leases' ends as crashes; shown as gone.
UPDATE leased_workers SET last_seen_at = leased_now() - :silent_after - 1
WHERE substr(id, 1, length(:prefix)) = :prefix;

-- name: expire_leases_of
-- Their leases end now: the reclaim in the same transaction takes them.
UPDATE leased_jobs SET lease_expires_at = leased_now()
WHERE status = 'running' AND substr(lease_owner, 1, length(:prefix)) = :prefix;

-- name: prune_workers
DELETE FROM leased_workers WHERE last_seen_at < leased_now() - 86400;

-- name: unregister_worker
DELETE FROM leased_workers WHERE id = :id;

-- name: list_workers
SELECT w.*, leased_now() - w.last_seen_at AS silent_seconds,
       (SELECT count(*) FROM leased_jobs AS j WHERE j.status = 'running' AND j.lease_owner = w.id) AS running
FROM leased_workers AS w
ORDER BY w.started_at;

-- name: applied_versions
SELECT version FROM leased_schema_version;

-- name: schema_compatibility
-- Which older code runs on the versions applied (migration 0022): read when the schema is newer
-- than this code.
SELECT version, oldest_code_version FROM leased_schema_compatibility;

-- name: create_version_table
CREATE TABLE IF NOT EXISTS leased_schema_version (
    version INTEGER PRIMARY KEY,
    applied_at REAL NOT NULL
);

-- Explaining one job (`leased why`): read in one read transaction with get_job, get_history and
-- list_workers.

-- name: why_now
SELECT leased_now() AS now;

-- name: jobs_ahead
-- Due pending jobs of the job's queue that a claim takes before it, in the claim's order (higher
-- priority, then earlier run_after, then lower id), counted up to the limit given.
SELECT count(*) AS n FROM (
    SELECT 1 FROM leased_jobs AS job, leased_jobs AS other
    WHERE job.id = :job_id
      AND other.status = 'pending' AND other.queue_name = job.queue_name AND other.run_after <= leased_now()
      AND other.priority >= job.priority
      AND (other.priority > job.priority OR other.run_after < job.run_after
           OR (other.run_after = job.run_after AND other.id < job.id))
    LIMIT :limit
);

-- name: pending_to_cancel
SELECT id, attempt, workflow_id FROM leased_jobs
WHERE status = 'pending'
  AND (:task_name IS NULL OR task_name = :task_name)
  AND (:queue_name IS NULL OR queue_name = :queue_name);

-- name: cancel_jobs
UPDATE leased_jobs SET status = 'cancelled', finished_at = leased_now()
WHERE id IN (SELECT value FROM json_each(:job_ids)) AND status = 'pending';

-- name: count_jobs
-- Two branches, as in list_jobs_newest: a status's jobs are counted in its index range.
WITH filtered AS NOT MATERIALIZED (
    SELECT status FROM leased_jobs
    WHERE (:task_name IS NULL OR task_name = :task_name)
      AND (:queue_name IS NULL OR queue_name = :queue_name))
SELECT (SELECT count(*) FROM filtered WHERE status = :status)
     + (SELECT count(*) FROM filtered WHERE :status IS NULL) AS n;

-- name: explain_expired_jobs
-- A worker's own account of why it let leases lapse (e.g. another connection held the write
-- lock) replaces the reclaimer's guess that it "stopped renewing", on the job while no later
-- attempt has begun; run before explain_expired_attempts, whose rows it finds unexplained.
UPDATE leased_jobs
SET last_error = 'lease expired: ' || :message
WHERE status <> 'running' AND (id, attempt) IN (
    SELECT job_id, attempt FROM leased_attempts
    WHERE worker_id = :worker_id AND outcome = 'expired'
      AND (job_id, attempt) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:leases)));

-- name: explain_expired_attempts
-- The same account on the attempts that expiry closed.
UPDATE leased_attempts
SET error_message = :message
WHERE worker_id = :worker_id AND outcome = 'expired'
  AND (job_id, attempt) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:leases));

-- Periodic jobs (backends/sql/schedules.py). A tick's time is epoch seconds, as the schedule computed it.

-- name: database_now
SELECT leased_now() AS now;

-- name: list_schedules
-- The last success reads the task's index backwards to its latest done job: one step while it succeeds.
SELECT s.*, j.status AS last_job_status,
       (SELECT d.finished_at FROM leased_jobs AS d INDEXED BY leased_jobs_task
        WHERE d.task_name = s.name AND d.status = 'done' ORDER BY d.id DESC LIMIT 1) AS last_success_at
FROM leased_schedules AS s LEFT JOIN leased_jobs AS j ON j.id = s.last_job_id
ORDER BY s.name;

-- name: ensure_schedule
INSERT INTO leased_schedules (name, expression, timezone, updated_at)
VALUES (:name, :expression, :timezone, leased_now())
ON CONFLICT (name) DO NOTHING;

-- name: lock_schedule
-- The transaction's write lock already serializes schedulers.
SELECT * FROM leased_schedules WHERE name = :name;

-- name: claim_tick
INSERT INTO leased_schedule_ticks (schedule_name, tick_at) VALUES (:schedule_name, :tick_at)
ON CONFLICT (schedule_name, tick_at) DO NOTHING
RETURNING tick_at;

-- name: job_active
SELECT 1 AS active FROM leased_jobs WHERE id = :job_id AND status IN ('pending', 'running', 'sleeping');

-- name: set_tick_job
UPDATE leased_schedule_ticks SET job_id = :job_id WHERE schedule_name = :schedule_name AND tick_at = :tick_at;

-- name: update_schedule
-- The last tick never moves back, whatever a worker with an older view of the schedule computed.
UPDATE leased_schedules
SET expression = :expression, timezone = :timezone,
    last_tick_at = max(coalesce(last_tick_at, :last_tick_at), :last_tick_at),
    last_job_id = :last_job_id, skipped_ticks = skipped_ticks + :skipped,
    last_skipped_at = coalesce(:last_skipped_at, last_skipped_at), updated_at = leased_now()
WHERE name = :name;

-- name: prune_ticks
DELETE FROM leased_schedule_ticks
WHERE schedule_name = :schedule_name
  AND tick_at < (SELECT tick_at FROM leased_schedule_ticks WHERE schedule_name = :schedule_name
                 ORDER BY tick_at DESC LIMIT 1 OFFSET :keep - 1);

-- Limits (0005). A claim takes limited jobs only through claim_limited, inside the same BEGIN
-- IMMEDIATE transaction that counts what runs: one writer at a time, so no two claims can both
-- see the same free room.

-- name: limits_in_use
-- Whether the claim must go through claim_limited: a job with a key waits, or a queue has a limit.
SELECT EXISTS (SELECT 1 FROM leased_jobs INDEXED BY leased_jobs_keyed_due
               WHERE status = 'pending' AND concurrency_key IS NOT NULL)
    OR EXISTS (SELECT 1 FROM leased_queue_limits) AS in_use;

-- name: claim_limited
-- Every due job, limited or not, in claim order, within the limits. It reads O(keys + limit) rows:
-- each waiting key is found by skipping through leased_jobs_keyed_due (one probe per key), its room
-- is its cap minus its running jobs (and its starts within the rate window), and only that many of
-- its jobs are read. A key with no room costs one probe however many jobs wait behind it. The
-- head job of a key (the next in claim order) carries the key's limits. Limited queues read their
-- own head through leased_jobs_queue_due; jobs without a key in other queues come from the due
-- index as in the plain claim. A paused queue's jobs are left out of all three. Room may be
-- negative after a limit was lowered: nothing is claimed.
-- Indexes are named: without statistics the planner would find each next key by scanning every
-- pending job.
WITH RECURSIVE keys (key) AS (
    SELECT min(concurrency_key) FROM leased_jobs INDEXED BY leased_jobs_keyed_due
    WHERE status = 'pending' AND concurrency_key IS NOT NULL
    UNION ALL
    SELECT (SELECT min(concurrency_key) FROM leased_jobs INDEXED BY leased_jobs_keyed_due
            WHERE status = 'pending' AND concurrency_key IS NOT NULL AND concurrency_key > keys.key)
    FROM keys WHERE keys.key IS NOT NULL
), heads AS (
    SELECT keys.key, (SELECT id FROM leased_jobs INDEXED BY leased_jobs_keyed_due
                      WHERE status = 'pending' AND concurrency_key = keys.key
                      ORDER BY priority DESC, run_after, id LIMIT 1) AS head_id
    FROM keys WHERE keys.key IS NOT NULL
), key_room AS MATERIALIZED (
    SELECT heads.key, min(
        coalesce(head.key_concurrency - (SELECT count(*) FROM leased_jobs INDEXED BY leased_jobs_keyed_running
                                         WHERE status = 'running' AND concurrency_key = heads.key), :limit),
        coalesce(head.key_rate_count - (SELECT count(*) FROM leased_starts
                                        WHERE limit_name = 'key:' || heads.key
                                          AND started_at > leased_now() - head.key_rate_seconds), :limit),
        :limit) AS room
    FROM heads JOIN leased_jobs AS head ON head.id = heads.head_id
), queue_room AS (
    SELECT l.queue_name, min(
        coalesce(l.concurrency - (SELECT count(*) FROM leased_jobs AS r
                                  WHERE r.queue_name = l.queue_name AND r.status = 'running'), :limit),
        coalesce(l.rate_count - (SELECT count(*) FROM leased_starts
                                 WHERE limit_name = 'queue:' || l.queue_name
                                   AND started_at > leased_now() - l.rate_seconds), :limit),
        :limit) AS room
    FROM leased_queue_limits AS l
), keyed AS (
    SELECT job.id, job.priority, job.run_after, job.queue_name, key_room.room,
           row_number() OVER (PARTITION BY job.concurrency_key ORDER BY job.priority DESC, job.run_after, job.id)
               AS place
    FROM key_room JOIN leased_jobs AS job ON job.id IN (
        SELECT id FROM leased_jobs INDEXED BY leased_jobs_keyed_due
        WHERE status = 'pending' AND concurrency_key = key_room.key AND run_after <= leased_now()
          AND task_name IN (SELECT value FROM json_each(:task_names))
          AND (:queue_names IS NULL OR queue_name IN (SELECT value FROM json_each(:queue_names)))
          AND queue_name NOT IN (SELECT queue_name FROM leased_queues WHERE paused_at IS NOT NULL)
        ORDER BY priority DESC, run_after, id
        LIMIT :limit)
    WHERE key_room.room > 0
), candidates AS (
    SELECT * FROM (
        SELECT id, priority, run_after, queue_name FROM leased_jobs INDEXED BY leased_jobs_due
        WHERE status = 'pending' AND concurrency_key IS NULL AND run_after <= leased_now()
          AND task_name IN (SELECT value FROM json_each(:task_names))
          AND (:queue_names IS NULL OR queue_name IN (SELECT value FROM json_each(:queue_names)))
          AND queue_name NOT IN (SELECT queue_name FROM leased_queues WHERE paused_at IS NOT NULL)
          AND queue_name NOT IN (SELECT queue_name FROM leased_queue_limits)
        ORDER BY priority DESC, run_after, id
        LIMIT :limit)
    UNION ALL
    SELECT job.id, job.priority, job.run_after, job.queue_name
    FROM queue_room JOIN leased_jobs AS job ON job.id IN (
        SELECT id FROM leased_jobs INDEXED BY leased_jobs_queue_due
        WHERE status = 'pending' AND concurrency_key IS NULL AND queue_name = queue_room.queue_name
          AND run_after <= leased_now()
          AND task_name IN (SELECT value FROM json_each(:task_names))
          AND (:queue_names IS NULL OR queue_name IN (SELECT value FROM json_each(:queue_names)))
          AND queue_name NOT IN (SELECT queue_name FROM leased_queues WHERE paused_at IS NOT NULL)
        ORDER BY priority DESC, run_after, id
        LIMIT :limit)
    WHERE queue_room.room > 0
    UNION ALL
    SELECT id, priority, run_after, queue_name FROM keyed WHERE place <= room
), ranked AS (
    SELECT candidates.*, row_number() OVER (PARTITION BY queue_name ORDER BY priority DESC, run_after, id) AS place
    FROM candidates
)
UPDATE leased_jobs
SET status = 'running', attempt = attempt + 1, lease_owner = :worker_id,
    lease_expires_at = leased_now() + lease_seconds, attempt_started_at = leased_now()
WHERE id IN (
    SELECT ranked.id FROM ranked LEFT JOIN queue_room ON queue_room.queue_name = ranked.queue_name
    WHERE queue_room.queue_name IS NULL OR ranked.place <= queue_room.room
    ORDER BY ranked.priority DESC, ranked.run_after, ranked.id
    LIMIT :limit
)
RETURNING *;

-- name: record_starts
-- The starts of claimed jobs that a rate limit counts, and the end of starts older than any window.
INSERT INTO leased_starts (limit_name, started_at)
SELECT 'key:' || concurrency_key, leased_now() FROM leased_jobs
WHERE id IN (SELECT value FROM json_each(:job_ids)) AND key_rate_count IS NOT NULL
UNION ALL
SELECT 'queue:' || job.queue_name, leased_now() FROM leased_jobs AS job
JOIN leased_queue_limits AS l ON l.queue_name = job.queue_name AND l.rate_count IS NOT NULL
WHERE job.id IN (SELECT value FROM json_each(:job_ids));

-- name: forget_old_starts
DELETE FROM leased_starts WHERE started_at < leased_now() - 3600;

-- name: set_queue_limit
INSERT INTO leased_queue_limits (queue_name, concurrency, rate_count, rate_seconds)
VALUES (:queue_name, :concurrency, :rate_count, :rate_seconds)
ON CONFLICT (queue_name) DO UPDATE
SET concurrency = excluded.concurrency, rate_count = excluded.rate_count, rate_seconds = excluded.rate_seconds;

-- name: clear_queue_limit
DELETE FROM leased_queue_limits WHERE queue_name = :queue_name;

-- name: queue_limits
SELECT * FROM leased_queue_limits ORDER BY queue_name;
-- Pausing queues, and pruning finished jobs (migration 0003).

-- name: ensure_queue
INSERT OR IGNORE INTO leased_queues (queue_name, paused_at) VALUES (:queue_name, NULL);

-- name: pause_queue
-- Changes a row only if this paused the queue (it was not paused already).
UPDATE leased_queues SET paused_at = leased_now() WHERE queue_name = :queue_name AND paused_at IS NULL;

-- name: resume_queue
UPDATE leased_queues SET paused_at = NULL WHERE queue_name = :queue_name AND paused_at IS NOT NULL;

-- name: paused_queues
SELECT queue_name, leased_now() - paused_at AS seconds FROM leased_queues
WHERE paused_at IS NOT NULL ORDER BY queue_name;

-- name: prunable_ids
-- One batch of a rule's finished jobs, oldest first through the finished_at index: a pass that
-- finds nothing to delete reads only the rows past the cutoff.
-- A workflow's step goes only once no step of its run can still run (workflow_id names it).
SELECT id, workflow_id FROM leased_jobs INDEXED BY leased_jobs_finished
WHERE finished_at < leased_now() - :older_than AND status = :status
  AND (:task_names IS NULL OR task_name IN (SELECT value FROM json_each(:task_names)))
  AND task_name NOT IN (SELECT value FROM json_each(:except_task_names))
  AND (workflow_id IS NULL OR NOT EXISTS (
      SELECT 1 FROM leased_jobs AS step INDEXED BY leased_jobs_workflow
      WHERE step.workflow_id = leased_jobs.workflow_id AND step.status IN ('waiting', 'pending', 'running', 'sleeping')))
ORDER BY finished_at
LIMIT :limit;

-- name: delete_jobs
-- Their attempts go with them (ON DELETE CASCADE). Only finished rows: the ids were picked in
-- this transaction, which holds the write lock, so none can have changed since.
DELETE FROM leased_jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND status IN ('done', 'failed', 'cancelled');

-- name: count_prunable
SELECT count(*) AS n FROM leased_jobs INDEXED BY leased_jobs_finished
WHERE finished_at < leased_now() - :older_than AND status = :status
  AND (:task_names IS NULL OR task_name IN (SELECT value FROM json_each(:task_names)))
  AND task_name NOT IN (SELECT value FROM json_each(:except_task_names));

-- name: prune_throughput
DELETE FROM leased_throughput WHERE minute < leased_now() - :older_than;

-- Folding the workers' own count rows (migration 0011) of minutes before :cutoff into one row per
-- minute, queue and task (worker_id ''): the sums the readers see are unchanged, and a month of
-- minutes keeps a row per queue and task however many workers ran. Workers count into the current
-- minute, so these rows no longer change; one written late is folded by a later pass. Both
-- statements take the same :cutoff (throughput_cutoff), in one transaction.

-- name: throughput_cutoff
SELECT leased_now() - :older_than AS cutoff;

-- name: fold_throughput
INSERT INTO leased_throughput (minute, queue_name, task_name, worker_id, done, failed)
SELECT minute, queue_name, task_name, '', sum(done), sum(failed) FROM leased_throughput
WHERE minute < :cutoff AND worker_id <> ''
GROUP BY minute, queue_name, task_name
ON CONFLICT (minute, queue_name, task_name, worker_id) DO UPDATE
SET done = done + excluded.done, failed = failed + excluded.failed;

-- name: delete_folded
DELETE FROM leased_throughput WHERE minute < :cutoff AND worker_id <> '';

-- name: throughput
-- Done and failed jobs per minute, queue and task (or, without :by_task, per minute alone) since
-- the start of the minute `window_seconds` ago, from the counts kept as jobs finish (migration
-- 0011): pruned jobs stay counted.
SELECT minute, CASE WHEN :by_task THEN queue_name END AS queue_name,
       CASE WHEN :by_task THEN task_name END AS task_name, sum(done) AS done, sum(failed) AS failed
FROM leased_throughput
WHERE minute >= CAST((leased_now() - :window_seconds) / 60 AS INTEGER) * 60
GROUP BY 1, 2, 3
ORDER BY 1;

-- Explaining one job, continued (`leased why`): its queue's pause, the limits a claim of it must
-- fit in (counted as claim_limited counts them), and the schedule tick that enqueued it. Read in
-- the same read transaction as why_now.

-- name: why_queue_paused
SELECT paused_at FROM leased_queues WHERE queue_name = :queue_name AND paused_at IS NOT NULL;

-- name: why_queue_limit
SELECT l.concurrency, l.rate_count, l.rate_seconds,
       (SELECT count(*) FROM leased_jobs WHERE queue_name = l.queue_name AND status = 'running') AS running,
       (SELECT count(*) FROM leased_starts
        WHERE limit_name = 'queue:' || l.queue_name AND started_at > leased_now() - l.rate_seconds) AS starts
FROM leased_queue_limits AS l WHERE l.queue_name = :queue_name;

-- name: why_key_limit
-- The key's limits are its head job's (its next in claim order), as the claim reads them.
SELECT head.key_concurrency AS concurrency, head.key_rate_count AS rate_count, head.key_rate_seconds AS rate_seconds,
       (SELECT count(*) FROM leased_jobs INDEXED BY leased_jobs_keyed_running
        WHERE status = 'running' AND concurrency_key = :concurrency_key) AS running,
       (SELECT count(*) FROM leased_starts
        WHERE limit_name = 'key:' || :concurrency_key AND started_at > leased_now() - head.key_rate_seconds) AS starts
FROM (SELECT key_concurrency, key_rate_count, key_rate_seconds FROM leased_jobs INDEXED BY leased_jobs_keyed_due
      WHERE status = 'pending' AND concurrency_key = :concurrency_key
      ORDER BY priority DESC, run_after, id LIMIT 1) AS head;

-- name: why_running_in_queue
SELECT id, lease_owner FROM leased_jobs WHERE status = 'running' AND queue_name = :queue_name ORDER BY id LIMIT :limit;

-- name: why_running_with_key
SELECT id, lease_owner FROM leased_jobs INDEXED BY leased_jobs_keyed_running
WHERE status = 'running' AND concurrency_key = :concurrency_key ORDER BY id LIMIT :limit;

-- name: why_next_slot
-- A full rate window lets one more start once its count-th newest start leaves it.
SELECT started_at + :rate_seconds AS at FROM leased_starts
WHERE limit_name = :limit_name AND started_at > leased_now() - :rate_seconds
ORDER BY started_at DESC LIMIT 1 OFFSET :rate_count - 1;

-- name: why_step
-- A workflow step's own row: when it runs, and whether its parents' ends cancelled it (not a person).
SELECT run_when, cancelled_by_parents FROM leased_steps WHERE job_id = :job_id;

-- name: why_schedule_tick
-- A periodic task's name is its schedule's, so the lookup stays within one schedule's ticks.
SELECT schedule_name, tick_at FROM leased_schedule_ticks WHERE schedule_name = :task_name AND job_id = :job_id;

-- name: main_database_file
-- The file a connection's main database is, as an absolute path ('' for :memory: and temporary
-- databases): a caller's connection= must have ours.
SELECT file FROM pragma_database_list WHERE name = 'main';

-- Workflows (backends/sql/workflows.py). Lists are JSON arrays; a step's counters are in leased_steps.

-- name: free_workflow_key
-- A finished run gives up its key, so that enqueueing the same workflow again starts a new one.
UPDATE leased_workflows SET idempotency_key = NULL
WHERE idempotency_key = :idempotency_key AND NOT EXISTS (
    SELECT 1 FROM leased_jobs WHERE workflow_id = leased_workflows.id AND status IN ('waiting', 'pending', 'running', 'sleeping'));

-- name: insert_workflow
-- No row back: an unfinished run holds the key.
INSERT INTO leased_workflows (name, idempotency_key, created_at) VALUES (:name, :idempotency_key, leased_now())
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id;

-- name: workflow_with_key
SELECT id FROM leased_workflows WHERE idempotency_key = :idempotency_key;

-- name: step_names
SELECT job_id, name FROM leased_steps WHERE workflow_id = :workflow_id;

-- name: insert_steps
-- Each step [job_id, workflow_id, name, run_when, parents_left, previous_id, added_by].
INSERT INTO leased_steps (job_id, workflow_id, name, run_when, parents_left, previous_id, added_by)
SELECT value ->> '$[0]', value ->> '$[1]', value ->> '$[2]', value ->> '$[3]', value ->> '$[4]',
       value ->> '$[5]', value ->> '$[6]'
FROM json_each(:steps);

-- name: insert_dependencies
-- Each edge [parent_id, child_id].
INSERT INTO leased_dependencies (parent_id, child_id)
SELECT value ->> '$[0]', value ->> '$[1]' FROM json_each(:edges) WHERE true
ON CONFLICT DO NOTHING;

-- name: lock_running_step
-- The step adding steps, fenced on its lease (the write lock keeps its end out meanwhile).
SELECT id, workflow_id FROM leased_jobs
WHERE id = :job_id AND attempt = :attempt AND lease_owner = :worker_id AND status = 'running';

-- name: lock_steps_of_run
-- Steps named in a new step's after=, of this run only (the write lock keeps their ends out).
SELECT id, status FROM leased_jobs
WHERE id IN (SELECT value FROM json_each(:job_ids)) AND workflow_id = :workflow_id;

-- name: children_of
SELECT child_id FROM leased_dependencies WHERE parent_id = :job_id;

-- name: lock_children
-- One row per edge from the given steps to a child, with the child's counters and status.
SELECT d.parent_id, s.job_id, s.parents_left, s.parents_failed, s.run_when, s.cancelled_by_parents, j.status
FROM json_each(:job_ids) AS ended
JOIN leased_dependencies AS d ON d.parent_id = ended.value
JOIN leased_steps AS s ON s.job_id = d.child_id
JOIN leased_jobs AS j ON j.id = s.job_id
ORDER BY s.job_id;

-- name: count_parents
-- Each [child_id, parents ended, of them failed]: negative to count them back (a retry).
UPDATE leased_steps
SET parents_left = parents_left - (counts.value ->> '$[1]'),
    parents_failed = max(parents_failed + (counts.value ->> '$[2]'), 0)
FROM json_each(:counts) AS counts
WHERE leased_steps.job_id = counts.value ->> '$[0]';

-- name: names_of_steps
SELECT job_id, name FROM leased_steps WHERE job_id IN (SELECT value FROM json_each(:job_ids));

-- name: previous_results
-- A chain's steps about to be released, with their arguments and the previous step's result.
SELECT s.job_id, j.args, previous.result FROM leased_steps AS s
JOIN leased_jobs AS j ON j.id = s.job_id
JOIN leased_jobs AS previous ON previous.id = s.previous_id
WHERE s.job_id IN (SELECT value FROM json_each(:job_ids));

-- name: set_args
UPDATE leased_jobs SET args = given.value ->> '$[1]'
FROM json_each(:steps) AS given
WHERE leased_jobs.id = given.value ->> '$[0]' AND leased_jobs.status = 'waiting';

-- name: release_steps
UPDATE leased_jobs SET status = 'pending', run_after = leased_now()
WHERE id IN (SELECT value FROM json_each(:job_ids)) AND status = 'waiting'
RETURNING queue_name;

-- name: cancel_steps
-- Each [job_id, reason]: cancelled in its parents' name, which a retry of the parent undoes.
UPDATE leased_jobs SET status = 'cancelled', finished_at = leased_now(), last_error = given.value ->> '$[1]'
FROM json_each(:steps) AS given
WHERE leased_jobs.id = given.value ->> '$[0]' AND leased_jobs.status = 'waiting';

-- name: mark_cancelled_by_parents
UPDATE leased_steps SET cancelled_by_parents = 1 WHERE job_id IN (SELECT value FROM json_each(:job_ids));

-- name: uncancel_steps
UPDATE leased_steps SET cancelled_by_parents = 0 WHERE job_id IN (SELECT value FROM json_each(:job_ids));

-- name: rewait_steps
UPDATE leased_jobs SET status = 'waiting'
WHERE id IN (SELECT value FROM json_each(:job_ids)) AND status = 'pending'
  AND id IN (SELECT job_id FROM leased_steps WHERE parents_left > 0 AND parents_failed = 0);

-- name: revive_steps
UPDATE leased_jobs SET status = 'waiting', finished_at = NULL, last_error = NULL
WHERE id IN (SELECT value FROM json_each(:job_ids)) AND status = 'cancelled';

-- name: unfinished_steps
SELECT id, attempt, lease_owner, status FROM leased_jobs INDEXED BY leased_jobs_workflow
WHERE workflow_id = :workflow_id AND status IN ('waiting', 'pending', 'running', 'sleeping');

-- name: cancel_unfinished_steps
UPDATE leased_jobs
SET status = 'cancelled', finished_at = leased_now(), lease_owner = NULL, lease_expires_at = NULL,
    last_error = 'workflow cancelled'
WHERE id IN (SELECT value FROM json_each(:job_ids)) AND status IN ('waiting', 'pending', 'running', 'sleeping');

-- name: failed_steps
SELECT id, queue_name FROM leased_jobs INDEXED BY leased_jobs_workflow
WHERE workflow_id = :workflow_id AND status = 'failed';

-- name: get_workflow
SELECT * FROM leased_workflows WHERE id = :workflow_id;

-- name: workflow_steps
SELECT s.job_id, s.name, s.run_when, s.parents_left, s.added_by, s.cancelled_by_parents, j.task_name,
       j.queue_name, j.status, j.attempt, j.max_attempts, j.created_at, j.finished_at, j.result, j.last_error
FROM leased_steps AS s JOIN leased_jobs AS j ON j.id = s.job_id
WHERE s.workflow_id = :workflow_id
ORDER BY s.job_id;

-- name: workflow_edges
SELECT d.parent_id, d.child_id FROM leased_steps AS s JOIN leased_dependencies AS d ON d.child_id = s.job_id
WHERE s.workflow_id = :workflow_id;

-- name: list_workflows
SELECT * FROM leased_workflows
WHERE (:before_id IS NULL OR id < :before_id) AND (:workflow_name IS NULL OR name = :workflow_name)
ORDER BY id DESC LIMIT :limit;

-- name: workflow_counts
-- Steps per status of each run, how many were skipped as their `when` asked, and its open ends:
-- steps no other step waits for that did not end done (nor skipped); and the compensation steps that
-- ran. runs.workflow_status reads them.
SELECT j.workflow_id, j.status, count(*) AS n,
       sum(s.cancelled_by_parents AND s.run_when = 'failed' AND j.status = 'cancelled') AS skipped,
       sum(j.status <> 'done' AND NOT (s.cancelled_by_parents AND s.run_when = 'failed' AND j.status = 'cancelled')
           AND NOT EXISTS (SELECT 1 FROM leased_dependencies AS d WHERE d.parent_id = j.id)) AS open_ends,
       sum(s.run_when = 'failed' AND j.status <> 'cancelled') AS compensations_run
FROM leased_jobs AS j INDEXED BY leased_jobs_workflow JOIN leased_steps AS s ON s.job_id = j.id
WHERE j.workflow_id IN (SELECT value FROM json_each(:workflow_ids))
GROUP BY j.workflow_id, j.status;

-- name: parents_of
-- With the trace context of each parent's last attempt, which a traced step's attempt links to.
SELECT s.name, p.id AS job_id, p.status, p.result, p.last_error,
       (SELECT a.trace_context FROM leased_attempts AS a WHERE a.job_id = p.id AND a.attempt = p.attempt) AS trace_context
FROM leased_dependencies AS d JOIN leased_jobs AS p ON p.id = d.parent_id JOIN leased_steps AS s ON s.job_id = p.id
WHERE d.child_id = :job_id
ORDER BY p.id;

-- name: delete_empty_workflows
DELETE FROM leased_workflows
WHERE id IN (SELECT value FROM json_each(:workflow_ids))
  AND NOT EXISTS (SELECT 1 FROM leased_jobs WHERE workflow_id = leased_workflows.id);

-- Durable steps (TaskContext.step; migration 0014). Recorded after lease_fence, in its transaction.
-- name: record_durable_step
INSERT INTO leased_durable_steps (job_id, name, attempt, result, started_at, finished_at)
VALUES (:job_id, :name, :attempt, :result, leased_now() - :seconds, leased_now());

-- name: durable_steps
SELECT name, attempt, result, started_at, finished_at FROM leased_durable_steps
WHERE job_id = :job_id ORDER BY started_at, name;

-- Jobs that wait (backends/sql/waits.py, migration 0026).
-- name: wait_ends_at
-- A wait's end by the database's clock: the end recorded when it first began (:until), else
-- :seconds from now, else NULL (a signal with no timeout); and whether it has come.
SELECT ends_at, ends_at <= leased_now() AS due FROM (SELECT coalesce(:until, leased_now() + :seconds) AS ends_at);

-- name: oldest_signal
SELECT id, payload FROM leased_signals
WHERE job_id = :job_id AND name = :name AND taken_by_attempt IS NULL ORDER BY id LIMIT 1;

-- name: take_signal
UPDATE leased_signals SET taken_by_attempt = :attempt, taken_at = leased_now()
WHERE id = :id AND taken_by_attempt IS NULL;

-- name: begin_wait
-- The attempt ends waiting, fenced on its lease (begin_wait's fence holds the row). max_attempts
-- grows by one: the attempt a wait ends does not count against it.
UPDATE leased_jobs
SET status = 'sleeping', lease_owner = NULL, lease_expires_at = NULL, max_attempts = max_attempts + 1
WHERE id = :job_id AND attempt = :attempt AND lease_owner = :worker_id AND status = 'running';

-- name: set_wait
INSERT INTO leased_waits (job_id, signal_name, since, wake_at) VALUES (:job_id, :signal_name, leased_now(), :wake_at)
ON CONFLICT (job_id) DO UPDATE SET signal_name = excluded.signal_name, since = excluded.since, wake_at = excluded.wake_at;

-- name: due_waits
-- Through leased_waits_wake_at: the range of waits whose end has come, and no other.
SELECT job_id FROM leased_waits INDEXED BY leased_waits_wake_at
WHERE wake_at IS NOT NULL AND wake_at <= leased_now() ORDER BY wake_at LIMIT :limit;

-- name: wake_jobs
-- Sleeping jobs made pending, due now. :job_ids is a JSON array.
UPDATE leased_jobs SET status = 'pending', run_after = leased_now()
WHERE id IN (SELECT value FROM json_each(:job_ids)) AND status = 'sleeping';

-- name: end_waits
-- The waits of jobs just woken. Of those due_waits read, only the ones still due: a job woken by
-- its signal meanwhile, which began a later wait, keeps that one.
DELETE FROM leased_waits
WHERE job_id IN (SELECT value FROM json_each(:job_ids)) AND (:due_only = 0 OR wake_at <= leased_now());

-- name: lock_for_signal
SELECT id, status, queue_name FROM leased_jobs WHERE id = :job_id;

-- name: job_with_key
-- The job an idempotency key names: its latest (an ended job's key may be taken again).
SELECT id FROM leased_jobs WHERE idempotency_key = :key ORDER BY id DESC LIMIT 1;

-- name: insert_signal
INSERT INTO leased_signals (job_id, name, payload, sent_at) VALUES (:job_id, :name, :payload, leased_now())
RETURNING id, job_id, name, payload, sent_at, taken_by_attempt, taken_at;

-- name: job_wait
SELECT job_id, signal_name, since, wake_at FROM leased_waits WHERE job_id = :job_id;

-- name: job_signals
SELECT id, job_id, name, payload, sent_at, taken_by_attempt, taken_at FROM leased_signals
WHERE job_id = :job_id ORDER BY id;
