-- Named queries of the PostgreSQL backend, with psycopg's named parameters. Every time is
-- leased_now(), the database's now() plus the clock seam's offset (migration 0007); table names are unqualified, so the connection's search_path picks the schema.
-- Leases travel as two parallel arrays, job_ids and attempts. Each write that changes a job and
-- its attempt record does both in one statement, with data-modifying CTEs.

-- name: insert_jobs
-- A batch in one statement. Each job is a JSON array [task_name, queue_name, args, kwargs, priority,
-- max_attempts, lease_seconds, run_at, delay_seconds, idempotency_key, timeout_seconds, concurrency_key,
-- key_concurrency, key_rate_count, key_rate_seconds, status, workflow_id, isolation, max_crashes,
-- trace_context], and the batch one array
-- of them: psycopg adapts
-- one string far faster than ten arrays of values. As jsonb the batch is
-- parsed once (each ->> on json parses its element again); args and kwargs are strings in it, so
-- they are stored exactly as written. A job whose key a pending job holds is skipped.
-- Ids follow the batch's order, which is how the caller matches rows to jobs: the identity
-- default is evaluated for each row as it leaves the SELECT, and the SELECT is ordered by position
-- (SQLAlchemy's insertmanyvalues relies on the same).
-- A job due now wakes listening workers: one NOTIFY per queue, delivered at commit, so inside a
-- caller's transaction it waits for theirs.
-- The times come back as UTC wall times (timestamp, not timestamptz), which the caller reads as
-- UTC: psycopg turns a timestamptz into the session's time zone with astimezone(), and the two
-- per job cost the client more than the rest of its row (a quarter of enqueue_many's Python).
WITH given AS (
    SELECT job ->> 0 AS task_name, job ->> 1 AS queue_name, (job ->> 2)::json AS args,
           (job ->> 3)::json AS kwargs, (job ->> 4)::int AS priority, (job ->> 5)::int AS max_attempts,
           (job ->> 6)::float8 AS lease_seconds, (job ->> 7)::timestamptz AS run_at,
           (job ->> 8)::float8 AS delay_seconds, job ->> 9 AS idempotency_key,
           (job ->> 10)::float8 AS timeout_seconds, job ->> 11 AS concurrency_key,
           (job ->> 12)::int AS key_concurrency, (job ->> 13)::int AS key_rate_count,
           (job ->> 14)::float8 AS key_rate_seconds, job ->> 15 AS status, (job ->> 16)::bigint AS workflow_id,
           job ->> 17 AS isolation, (job ->> 18)::int AS max_crashes,
           job ->> 19 AS trace_context, position
    FROM jsonb_array_elements(%(jobs)s::jsonb) WITH ORDINALITY AS batch (job, position)
), job AS (
    INSERT INTO leased_jobs (task_name, queue_name, args, kwargs, priority, max_attempts, lease_seconds,
                             run_after, created_at, idempotency_key, timeout_seconds, concurrency_key,
                             key_concurrency, key_rate_count, key_rate_seconds, status, workflow_id, isolation,
                             max_crashes, trace_context)
    SELECT task_name, queue_name, args, kwargs, priority, max_attempts, lease_seconds,
           coalesce(run_at, leased_now() + make_interval(secs => delay_seconds)), leased_now(), idempotency_key, timeout_seconds,
           concurrency_key, key_concurrency, key_rate_count, key_rate_seconds, status, workflow_id, isolation,
           max_crashes, trace_context
    FROM given
    ORDER BY position
    ON CONFLICT (idempotency_key) WHERE status = 'pending' AND attempt = 0 AND idempotency_key IS NOT NULL
    DO NOTHING
    RETURNING id, queue_name, run_after, created_at, idempotency_key, status
), woke AS (
    SELECT count(pg_notify(left('leased.' || current_schema(), 63), queue_name)) AS queues
    FROM (SELECT DISTINCT queue_name FROM job WHERE run_after <= leased_now() AND status = 'pending') AS due
)
SELECT job.id, job.run_after AT TIME ZONE 'UTC', job.created_at AT TIME ZONE 'UTC', job.idempotency_key FROM job, woke;

-- name: insert_job
-- One job, as insert_jobs would insert it, without a batch to parse: about 70 µs less per call,
-- a tenth of an enqueue. Its times come back as insert_jobs' do.
INSERT INTO leased_jobs (task_name, queue_name, args, kwargs, priority, max_attempts, lease_seconds,
                         run_after, created_at, idempotency_key, timeout_seconds, concurrency_key,
                         key_concurrency, key_rate_count, key_rate_seconds, status, workflow_id, isolation,
                             max_crashes, trace_context)
VALUES (%(task_name)s, %(queue_name)s, %(args_json)s::json, %(kwargs_json)s::json, %(priority)s, %(max_attempts)s,
        %(lease_seconds)s::float8,
        coalesce(%(run_at)s::timestamptz, leased_now() + make_interval(secs => %(delay_seconds)s::float8)),
        leased_now(), %(idempotency_key)s, %(timeout_seconds)s::float8, %(concurrency_key)s, %(key_concurrency)s::int,
        %(key_rate_count)s::int, %(key_rate_seconds)s::float8, %(status)s, %(workflow_id)s::bigint,
        %(isolation)s, %(max_crashes)s, %(trace_context)s)
ON CONFLICT (idempotency_key) WHERE status = 'pending' AND attempt = 0 AND idempotency_key IS NOT NULL
DO NOTHING
RETURNING id, run_after AT TIME ZONE 'UTC', created_at AT TIME ZONE 'UTC', idempotency_key,
          CASE WHEN run_after <= leased_now() AND status = 'pending' THEN pg_notify(left('leased.' || current_schema(), 63), queue_name) END;

-- name: pending_with_key
SELECT * FROM leased_jobs
WHERE idempotency_key = %(idempotency_key)s AND status = 'pending' AND attempt = 0;

-- name: session_settings
-- The session settings of leased's other connections (enqueue, finish, renew, the dashboard's
-- reads). JIT never pays for statements this short, and where the planner cannot know a bound it
-- guesses a third of the table: at ten million jobs the dashboard's per-minute chart, which reads
-- the 20,000 jobs of its hour in 10 ms, spent 300 ms compiling itself first.
SELECT set_config('jit', 'off', false);

-- name: claim_settings
-- The session settings of the connections that claim (and return expired leases); no other
-- statement runs on them.
-- The plan: without statistics (a new table, or a burst before autovacuum's first ANALYZE) the
-- planner guesses that few jobs are pending, combines the status and task indexes in a bitmap and
-- sorts every pending row to return ten: 20 ms a claim at 20,000 pending, against 0.8 ms for
-- reading the head of the due index, which is already in claim order. Ruling out the sort and
-- the bitmap leaves that index scan whatever the statistics; ruling out sequential scans keeps the
-- writes of the claimed rows on the primary key when a young table looks too small to bother.
-- The commit does not wait for the WAL flush: if the server crashes, a claim from its last moments
-- is forgotten, the job is pending again and runs again, and the first run's result is refused by
-- the fence. That is at-least-once, as always; enqueues and results still wait for the flush.
-- JIT never pays for a claim, and ruling out sorts inflates claim_limited's estimated cost (its
-- window needs one) past the threshold where PostgreSQL would spend seconds compiling it.
-- A generic plan for every prepared statement: the claim reads a partitioned table (leased_due,
-- migration 0018), whose custom plan took as long to make as the claim took to run, and PostgreSQL
-- kept making one (a claim of 10: 1.1-1.4 ms with custom plans, 0.65-0.82 ms with the generic one; the
-- plan tests check the generic plan too).
-- Behind a pooler (PgBouncer) the session is not ours to set: each claim's transaction sets them
-- for itself (for_transaction, SET LOCAL), in the same round trip as the claim.
SELECT set_config('enable_sort', 'off', %(for_transaction)s),
       set_config('enable_bitmapscan', 'off', %(for_transaction)s),
       set_config('enable_seqscan', 'off', %(for_transaction)s),
       set_config('synchronous_commit', 'off', %(for_transaction)s),
       set_config('jit', 'off', %(for_transaction)s),
       set_config('plan_cache_mode', 'force_generic_plan', %(for_transaction)s),
       set_config('leased.claims_own_due_rows', 'on', %(for_transaction)s);

-- name: claim
-- Jobs without a key in queues without a limit; claim_limited takes the others (see there). Read
-- from leased_due (migration 0018). It never waits: due rows and jobs' rows that others hold are
-- skipped. A due row claims only the job it was written for (migration 0021): pending, without a
-- key, at the row's priority, due time, queue and task, so a row whose job is gone or has moved
-- (a TRUNCATE, writes with triggers off, a reused id) claims nothing. Of the rows it took, it
-- deletes those whose job it claimed, and those that do not hold in its snapshot (the job is not
-- held elsewhere: a writer holding a job deletes the row itself, if the job leaves the set, once
-- this claim commits). stale_due_rows counts the second kind, on every row and on a row of its
-- own (id NULL) when nothing was claimed: a claim that met some claims again at once, rather than
-- reading a short claim as an empty queue.
WITH due AS (
    SELECT generation, priority, run_after, id, queue_name, task_name FROM leased_due
    WHERE run_after <= leased_now()
      AND task_name = ANY(%(task_names)s::text[])
      AND (%(queue_names)s::text[] IS NULL OR queue_name = ANY(%(queue_names)s::text[]))
      AND queue_name NOT IN (SELECT queue_name FROM leased_queue_limits)
      AND queue_name NOT IN (SELECT queue_name FROM leased_queues WHERE paused_at IS NOT NULL)
    ORDER BY priority DESC, run_after, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), seen AS (
    -- Each job found by its primary key alone (see fused_finish): without statistics the planner would
    -- read the pending jobs' indexes of leased_jobs, the dead entries a held horizon keeps included.
    SELECT due.generation, due.priority, due.run_after, due.id,
           job.id IS NOT NULL AND job.refused IS NULL AS ready, job.refused,
           CASE WHEN job.id IS NULL THEN NOT EXISTS (
               SELECT FROM leased_jobs AS held
               WHERE held.id = due.id AND held.status = 'pending' AND held.concurrency_key IS NULL
                 AND (held.priority, held.run_after, held.queue_name, held.task_name)
                     = (due.priority, due.run_after, due.queue_name, due.task_name)) END AS stale
    FROM due
    LEFT JOIN LATERAL (SELECT id, leased_refused_row(attempt, lease_seconds) AS refused FROM leased_jobs
                       WHERE id = due.id AND status = 'pending' AND concurrency_key IS NULL
                         AND (priority, run_after, queue_name, task_name)
                             = (due.priority, due.run_after, due.queue_name, due.task_name)
                       LIMIT 1 FOR UPDATE SKIP LOCKED) AS job ON true
), refused AS (
    -- A row no enqueue of leased writes: failed with why, not claimed (leased_refused_row, migration
    -- 0021); its update trigger deletes its due row.
    UPDATE leased_jobs AS job SET status = 'failed', finished_at = leased_now(), last_error = seen.refused
    FROM seen
    WHERE job.id = seen.id AND seen.refused IS NOT NULL
), taken AS (
    DELETE FROM leased_due AS row USING seen
    WHERE (seen.ready OR seen.stale)
      AND row.generation = seen.generation AND row.priority = seen.priority AND row.run_after = seen.run_after
      AND row.id = seen.id
), claimed AS (
    UPDATE leased_jobs AS job
    SET status = 'running', attempt = job.attempt + 1, lease_owner = %(worker_id)s,
        lease_expires_at = leased_now() + make_interval(secs => job.lease_seconds), attempt_started_at = leased_now()
    FROM seen
    WHERE job.id = seen.id AND seen.ready
    RETURNING job.*
)
SELECT claimed.*, stale.n AS stale_due_rows
FROM (SELECT count(*) FILTER (WHERE stale) AS n FROM seen) AS stale
LEFT JOIN claimed ON true
WHERE claimed.id IS NOT NULL OR stale.n > 0;

-- name: mend_due
-- The due set made exact again, once per worker process at its first claim (migration 0021).
SELECT * FROM leased_mend_due();

-- name: rotate_due
-- Once a second, after a claim (migration 0018): when the current generation has grown to 64 KB
-- (about 800 jobs), and the oldest has at most 1,000 jobs still pending to carry over. A claim
-- then steps over the dead entries of about three generations at most, however long another
-- transaction holds the horizon back; and an idle queue truncates nothing.
SELECT leased_rotate_due(65536, 1000) AS rotated;

-- name: fused_renew
-- Rows are locked in id order, as fused_finish and fused_release lock them: writers that take many rows in
-- different orders deadlock. Each is found by its primary key alone (see fused_finish). :progress is
-- each attempt's latest report since the renewal before (TaskContext.progress), NULL if none: it
-- rides on the renewal, a column no index reads, so the update stays HOT.
WITH held AS (
    SELECT job.id, given.progress
    FROM (SELECT * FROM unnest(%(job_ids)s::bigint[], %(attempts)s::int[], %(progress)s::text[])
              AS given (id, attempt, progress) ORDER BY id) AS given
    CROSS JOIN LATERAL (SELECT id, attempt, status, lease_owner, lease_expires_at FROM leased_jobs
                        WHERE id = given.id LIMIT 1 FOR UPDATE) AS job
    WHERE job.attempt = given.attempt AND job.status = 'running' AND job.lease_owner = %(worker_id)s
      AND job.lease_expires_at > leased_now()
)
UPDATE leased_jobs AS job
SET lease_expires_at = leased_now() + make_interval(secs => job.lease_seconds),
    progress = coalesce(held.progress, job.progress)
FROM held
WHERE job.id = held.id
RETURNING job.id, job.attempt;

-- name: lease_fence
-- A transactional handler's end (store.finish_in), in the handler's own transaction: the lease
-- still held and not expired by the database's clock, the row locked until the handler's writes
-- commit with the end. The clock is the statement's: leased_now() is when the transaction began.
SELECT id, attempt, queue_name, task_name, workflow_id FROM leased_jobs
WHERE id = %(job_id)s AND attempt = %(attempt)s AND lease_owner = %(worker_id)s AND status = 'running'
  AND lease_expires_at > leased_now() + (statement_timestamp() - now())
FOR UPDATE;

-- name: fused_finish
-- A batch of attempts' ends in one statement, each fenced on its lease: an end whose lease was
-- lost (expired and reclaimed, cancelled) matches no held row and writes nothing.
WITH ends AS (
    SELECT * FROM unnest(%(job_ids)s::bigint[], %(attempts)s::int[], %(worker_ids)s::text[],
                         %(statuses)s::text[], %(results)s::text[], %(last_errors)s::text[],
                         %(retry_in_seconds)s::float8[], %(outcomes)s::text[], %(error_types)s::text[],
                         %(error_messages)s::text[], %(tracebacks)s::text[], %(progress)s::text[],
                         %(handler_outlived_limits)s::boolean[], %(trace_contexts)s::text[])
        AS ends (id, attempt, worker_id, status, result, last_error, retry_in_seconds, outcome, error_type,
                 error_message, traceback, progress, handler_outlived_limit, trace_context)
), held AS (
    -- Each row is found by its primary key alone, whatever the statistics say: a plan that read
    -- every 'running' index entry instead walked the dead entries of all jobs claimed since the
    -- last vacuum, and took up to a second a batch under a large history.
    -- Untold progress is the attempt's latest report, as its last renewal wrote it. Its attempt is
    -- matched in the text Progress.to_json writes, never by casting the column: one row another
    -- program wrote that is not JSON made the cast fail every finish and reclaim it was in.
    SELECT ends.id, ends.attempt, ends.worker_id, ends.status, ends.result, ends.last_error, ends.retry_in_seconds,
           ends.outcome, ends.error_type, ends.error_message, ends.traceback, ends.handler_outlived_limit,
           ends.trace_context, job.attempt_started_at,
           coalesce(ends.progress, CASE WHEN job.progress LIKE '%%"attempt": ' || job.attempt || '}'
                                        THEN job.progress END) AS progress
    FROM (SELECT * FROM ends ORDER BY id) AS ends
    CROSS JOIN LATERAL (SELECT id, attempt, status, lease_owner, attempt_started_at, progress FROM leased_jobs
                        WHERE id = ends.id LIMIT 1 FOR UPDATE) AS job  -- LIMIT: no filter is pushed down to pick another index
    WHERE job.attempt = ends.attempt AND job.lease_owner = ends.worker_id AND job.status = 'running'
), finished AS (
    -- Each step carries the columns the next needs and joins one row by key: a generic plan
    -- guesses ten rows for an unnest, and re-joining the batch by CTE scans was quadratic in it.
    UPDATE leased_jobs AS job
    SET status = held.status,
        result = held.result::json,
        last_error = coalesce(held.last_error, job.last_error),
        finished_at = CASE WHEN held.status = 'pending' THEN NULL ELSE leased_now() END,
        run_after = CASE WHEN held.status = 'pending'
                         THEN leased_now() + make_interval(secs => held.retry_in_seconds)
                         ELSE job.run_after END,
        lease_owner = NULL,
        lease_expires_at = NULL,
        progress = coalesce(held.progress, job.progress),
        crashes = job.crashes + (held.outcome = 'crashed')::int  -- an attempt whose process died (migration 0023)
    FROM held
    WHERE job.id = held.id
    RETURNING job.id, job.attempt, job.status, job.queue_name, job.task_name, job.workflow_id, held.worker_id,
              held.attempt_started_at, held.outcome, held.error_type, held.error_message, held.traceback,
              held.progress, held.handler_outlived_limit, held.trace_context
), counted AS (
    -- Finished jobs counted by minute in this worker's own rows (migration 0011), in key order; a
    -- transactional handler's in its thread's own row (:counted_as, store.finish_in).
    INSERT INTO leased_throughput AS t (minute, queue_name, task_name, worker_id, done, failed)
    SELECT date_trunc('minute', leased_now()), queue_name, task_name, coalesce(%(counted_as)s::text, worker_id),
           count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'failed')
    FROM finished WHERE status IN ('done', 'failed')
    GROUP BY queue_name, task_name, worker_id
    ORDER BY queue_name, task_name, worker_id
    ON CONFLICT (minute, queue_name, task_name, worker_id) DO UPDATE
    SET done = t.done + excluded.done, failed = t.failed + excluded.failed
), recorded AS (
    -- The attempt's record, written once as it ends, from what the claim wrote in the job row. A
    -- record that an older version opened at claim is closed in place.
    INSERT INTO leased_attempts AS a (job_id, attempt, worker_id, started_at, finished_at, outcome, error_type,
                                      error_message, traceback, progress, handler_outlived_limit, trace_context)
    SELECT id, attempt, worker_id, coalesce(attempt_started_at, leased_now()), leased_now(), outcome, error_type,
           error_message, traceback, progress, handler_outlived_limit, trace_context
    FROM finished
    ON CONFLICT (job_id, attempt) DO UPDATE
    SET finished_at = excluded.finished_at, outcome = excluded.outcome, error_type = excluded.error_type,
        error_message = excluded.error_message, traceback = excluded.traceback, progress = excluded.progress,
        handler_outlived_limit = excluded.handler_outlived_limit, trace_context = excluded.trace_context
    WHERE a.outcome IS NULL
)
SELECT id, attempt, status, workflow_id, worker_id FROM finished;

-- name: fused_release
WITH given AS (
    SELECT * FROM unnest(%(job_ids)s::bigint[], %(attempts)s::int[]) AS given (id, attempt)
), held AS (
    -- Found by primary key alone and locked in id order (see fused_finish).
    SELECT job.id, job.attempt, job.attempt_started_at, job.progress
    FROM (SELECT * FROM given ORDER BY id) AS given
    CROSS JOIN LATERAL (SELECT id, attempt, status, lease_owner, attempt_started_at, progress FROM leased_jobs
                        WHERE id = given.id LIMIT 1 FOR UPDATE) AS job
    WHERE job.attempt = given.attempt AND job.status = 'running' AND job.lease_owner = %(worker_id)s
), released AS (
    UPDATE leased_jobs AS job
    SET status = 'pending', run_after = leased_now(), lease_owner = NULL, lease_expires_at = NULL
    FROM held
    WHERE job.id = held.id
)
-- Only the attempts still held: one that lease expiry or a user's cancel ended has its record.
INSERT INTO leased_attempts AS a (job_id, attempt, worker_id, started_at, finished_at, outcome, error_message,
                                  progress)
SELECT id, attempt, %(worker_id)s, coalesce(attempt_started_at, leased_now()), leased_now(), %(outcome)s,
       %(message)s, CASE WHEN progress LIKE '%%"attempt": ' || attempt || '}' THEN progress END
FROM held
ON CONFLICT (job_id, attempt) DO UPDATE
SET finished_at = excluded.finished_at, outcome = excluded.outcome, error_message = excluded.error_message
WHERE a.outcome IS NULL;

-- name: fused_reclaim_expired
-- SKIP LOCKED: a row another reclaimer or a finishing worker holds is theirs to settle; waiting
-- on it could deadlock two reclaimers that lock the same rows in different orders.
-- With steps false, a workflow's step on its last attempt is left out: it fails, and its failure
-- settles its children (backends/sql/workflows.py), which a transaction of its own does with
-- steps true (reclaim_expired_steps in fused.py); steps_left says whether any waits for it.
-- The running jobs are read once (lapsed), and only the few whose lease lapsed are locked, by
-- primary key: while a transaction elsewhere holds the vacuum horizon back, leased_jobs_leases
-- keeps an entry for every job claimed since, and each is a visit to the table (a second read
-- for steps_left doubled that).
-- With a spacing, a worker's periodic reclaim that another worker's took the turn of reads nothing
-- (migration 0020): the subquery is computed once, before the scan, which it gates.
-- A lease that expired with its worker gone (its row silent for :silent_after seconds or more, or
-- marked so by bury_worker; a worker that never registered is not known to be dead) ended
-- because the worker's process died: a crash (outcome crashed), added to the job's crashes; the
-- crash that reaches max_crashes fails the job as a poison job (migration 0023). A worker still
-- beating stalled or was cut off: outcome expired, as before. (The words are jobs.py's.) With a
-- buried_prefix (bury_workers), the crashes of the workers it names say how they died, buried_how.
WITH lapsed AS MATERIALIZED (
    SELECT id, gone, workflow_id IS NOT NULL AND (attempt >= max_attempts OR gone AND crashes + 1 >= max_crashes)
                     AS last_step
    FROM (SELECT *, EXISTS (SELECT FROM leased_workers AS w
                            WHERE w.id = lease_owner
                              AND w.last_seen_at <= leased_now() - make_interval(secs => %(silent_after)s::float8)) AS gone
          FROM leased_jobs
          WHERE (SELECT leased_reclaim_turn(%(spacing)s::double precision))
            AND status = 'running' AND lease_expires_at <= leased_now()) AS running
), expired AS (
    -- Checked again as locked: the job may have ended, or its lease been renewed, since lapsed read it.
    SELECT id, lease_owner, attempt_started_at, (SELECT gone FROM lapsed WHERE lapsed.id = job.id) AS gone
    FROM leased_jobs AS job
    WHERE id = ANY(ARRAY(SELECT id FROM lapsed WHERE last_step = %(steps)s::bool))
      AND status = 'running' AND lease_expires_at <= leased_now()
    FOR UPDATE SKIP LOCKED
), ending AS (
    SELECT expired.id, expired.lease_owner, expired.attempt_started_at, buried.dying OR expired.gone AS gone,
           job.attempt >= job.max_attempts OR (buried.dying OR expired.gone) AND job.crashes + 1 >= job.max_crashes
           AS fails,
           (buried.dying OR expired.gone) AND job.crashes + 1 >= job.max_crashes AS quarantines,
           CASE WHEN buried.dying
                THEN 'worker ' || expired.lease_owner || ' died: ' || %(buried_how)s::text || ' (seen by its supervisor)'
                WHEN expired.gone
                THEN 'lease expired: worker ' || expired.lease_owner || ' is gone (silent for over '
                     || %(silent_after)s::float8::text || 's): its process died'
                ELSE 'lease expired: worker ' || expired.lease_owner || ' stopped renewing it (crashed, stalled or cut off)'
           END AS message
    FROM expired JOIN leased_jobs AS job ON job.id = expired.id
    -- A buried worker is dead even if it died before its first beat wrote its row.
    CROSS JOIN LATERAL (SELECT coalesce(left(expired.lease_owner, length(%(buried_prefix)s::text))
                                        = %(buried_prefix)s::text, false) AS dying) AS buried
), reclaimed AS (
    UPDATE leased_jobs AS job
    SET status = CASE WHEN ending.fails THEN 'failed' ELSE 'pending' END,
        finished_at = CASE WHEN ending.fails THEN leased_now() END,
        last_error = CASE WHEN ending.quarantines
                          THEN 'quarantined after ' || (job.crashes + 1)
                               || CASE WHEN job.crashes = 0 THEN ' crash: ' ELSE ' crashes: ' END || ending.message
                          ELSE ending.message END,
        crashes = job.crashes + ending.gone::int,
        run_after = leased_now(),
        lease_owner = NULL,
        lease_expires_at = NULL
    FROM ending
    WHERE job.id = ending.id
    RETURNING job.id, job.attempt, job.status, job.queue_name, job.task_name, ending.message, ending.lease_owner,
              ending.attempt_started_at, job.workflow_id, job.progress, ending.gone
), counted AS (
    -- A job whose last attempt expired has failed: counted in its worker's rows (migration 0011).
    INSERT INTO leased_throughput AS t (minute, queue_name, task_name, worker_id, failed)
    SELECT date_trunc('minute', leased_now()), queue_name, task_name, lease_owner, count(*)
    FROM reclaimed WHERE status = 'failed'
    GROUP BY queue_name, task_name, lease_owner
    ORDER BY queue_name, task_name, lease_owner
    ON CONFLICT (minute, queue_name, task_name, worker_id) DO UPDATE SET failed = t.failed + excluded.failed
), recorded AS (
    -- The record of an attempt whose worker stopped renewing (crashed, say), from the job row as
    -- it was before the reclaim cleared its lease: the only place its worker and start are kept.
    INSERT INTO leased_attempts AS a (job_id, attempt, worker_id, started_at, finished_at, outcome, error_message,
                                      progress)
    SELECT id, attempt, lease_owner, coalesce(attempt_started_at, leased_now()), leased_now(),
           CASE WHEN gone THEN 'crashed' ELSE 'expired' END, message,
           CASE WHEN progress LIKE '%%"attempt": ' || attempt || '}' THEN progress END
    FROM reclaimed
    ON CONFLICT (job_id, attempt) DO UPDATE
    SET finished_at = excluded.finished_at, outcome = excluded.outcome, error_message = excluded.error_message
    WHERE a.outcome IS NULL
)
SELECT count(*) AS n,
       coalesce(jsonb_agg(jsonb_build_object('id', id, 'status', status, 'workflow_id', workflow_id))
                FILTER (WHERE workflow_id IS NOT NULL AND status = 'failed'), '[]') AS failed_steps,
       (SELECT count(*) FROM lapsed WHERE last_step) AS steps_left
FROM reclaimed;

-- name: get_job
SELECT * FROM leased_jobs WHERE id = %(job_id)s;

-- name: get_history
SELECT * FROM leased_attempts WHERE job_id = %(job_id)s ORDER BY attempt;

-- name: list_jobs_newest
-- Pending jobs by primary key, their ids read from the due set and the keyed jobs' partial index:
-- no index of leased_jobs holds every pending job (migration 0019), and the status filter alone
-- would read the whole history. For any other status the condition is true, and a custom plan
-- drops it.
SELECT * FROM leased_jobs
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(status)s::text IS DISTINCT FROM 'pending' OR id = ANY(ARRAY(
      SELECT id FROM leased_due UNION ALL
      SELECT id FROM leased_jobs WHERE status = 'pending' AND concurrency_key IS NOT NULL)))
  AND (%(queue_name)s::text IS NULL OR queue_name = %(queue_name)s::text)
  AND (%(task_name)s::text IS NULL OR task_name = %(task_name)s::text)
  AND (%(search)s::text IS NULL OR id = %(search_id)s::bigint OR idempotency_key = %(search)s::text)
  AND (%(before_id)s::bigint IS NULL OR id < %(before_id)s::bigint)
  AND (%(worker_id)s::text IS NULL OR lease_owner = %(worker_id)s::text
       OR id IN (SELECT job_id FROM leased_attempts WHERE worker_id = %(worker_id)s::text))
ORDER BY id DESC
LIMIT %(limit)s;

-- name: list_jobs_oldest
SELECT * FROM leased_jobs
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(status)s::text IS DISTINCT FROM 'pending' OR id = ANY(ARRAY(
      SELECT id FROM leased_due UNION ALL
      SELECT id FROM leased_jobs WHERE status = 'pending' AND concurrency_key IS NOT NULL)))
  AND (%(queue_name)s::text IS NULL OR queue_name = %(queue_name)s::text)
  AND (%(task_name)s::text IS NULL OR task_name = %(task_name)s::text)
  AND (%(search)s::text IS NULL OR id = %(search_id)s::bigint OR idempotency_key = %(search)s::text)
  AND (%(after_id)s::bigint IS NULL OR id > %(after_id)s::bigint)
  AND (%(worker_id)s::text IS NULL OR lease_owner = %(worker_id)s::text
       OR id IN (SELECT job_id FROM leased_attempts WHERE worker_id = %(worker_id)s::text))
ORDER BY id
LIMIT %(limit)s;

-- name: counts
-- Every row, exactly: `Leased.counts()`, for scripts and tests. The dashboard reads the cheap ones below.
SELECT queue_name, status, count(*) AS n FROM leased_jobs GROUP BY queue_name, status;

-- Cheap counts (leased/counts.py), read in one snapshot. None of them reads the finished history.
-- name: count_id_range
SELECT min(id) AS low, max(id) AS high FROM leased_jobs;

-- name: count_active
-- Exact, each part from what the claims and the reclaim read: the due set (pending jobs without a
-- key, migration 0019), and the partial indexes of keyed pending jobs and of the leases.
SELECT queue_name, 'pending' AS status, count(*) AS n FROM leased_due GROUP BY queue_name
UNION ALL
SELECT queue_name, 'pending', count(*) FROM leased_jobs
WHERE status = 'pending' AND concurrency_key IS NOT NULL GROUP BY queue_name
UNION ALL
SELECT queue_name, 'running', count(*) FROM leased_jobs WHERE status = 'running' GROUP BY queue_name
UNION ALL
SELECT queue_name, 'waiting', count(*) FROM leased_jobs WHERE status = 'waiting' GROUP BY queue_name
UNION ALL
SELECT queue_name, 'sleeping', count(*) FROM leased_jobs WHERE status = 'sleeping' GROUP BY queue_name;

-- name: recent_quarantined
-- Poison jobs (migration 0023) among the latest failed jobs, by queue: a bounded read through the
-- status index, for the leased_jobs_quarantined gauge.
SELECT queue_name, count(*) AS n
FROM (SELECT queue_name, crashes, max_crashes FROM leased_jobs WHERE status = 'failed' ORDER BY id DESC
      LIMIT %(recent)s) AS failed
WHERE crashes >= max_crashes
GROUP BY queue_name;

-- name: count_capped
-- Failed and cancelled jobs counted up to `cap` each: an index range, no row read. A status under
-- the cap is then split by queue (count_split); one at the cap is estimated by the caller.
SELECT 'failed' AS status, count(*) AS n FROM (SELECT 1 FROM leased_jobs WHERE status = 'failed' LIMIT %(cap)s) AS failed
UNION ALL
SELECT 'cancelled', count(*) FROM (SELECT 1 FROM leased_jobs WHERE status = 'cancelled' LIMIT %(cap)s) AS cancelled;

-- name: count_split
-- Failed and cancelled per queue, each only if its flag is set (it was under the cap): a false
-- flag is a constant condition, so that part reads nothing.
SELECT queue_name, 'failed' AS status, count(*) AS n FROM leased_jobs
WHERE status = 'failed' AND %(failed)s::boolean GROUP BY queue_name
UNION ALL
SELECT queue_name, 'cancelled', count(*) FROM leased_jobs
WHERE status = 'cancelled' AND %(cancelled)s::boolean GROUP BY queue_name;

-- name: count_sample
-- The jobs at the probed ids, by primary key; an id with no job (pruned, deleted) is a miss.
SELECT j.queue_name, j.status, count(*) AS n
FROM unnest(%(ids)s::bigint[]) AS probe (id) JOIN leased_jobs AS j ON j.id = probe.id
GROUP BY j.queue_name, j.status;

-- name: fused_retry
-- A retried job is due now: it wakes listening workers on enqueue's channel, at commit, so that
-- a retry from the CLI or the dashboard starts at once rather than at the workers' next poll.
WITH retried AS (
    UPDATE leased_jobs
    SET status = 'pending', run_after = leased_now(), finished_at = NULL,
        max_attempts = greatest(max_attempts, attempt + 1),
        crashes = least(crashes, max_crashes - 1)
    WHERE id = %(job_id)s AND status IN ('failed', 'cancelled')
    RETURNING *
)
SELECT retried.*, pg_notify(left('leased.' || current_schema(), 63), retried.queue_name) AS woke FROM retried;

-- name: fused_cancel
WITH target AS (
    SELECT id, status, attempt, lease_owner, attempt_started_at FROM leased_jobs
    WHERE id = %(job_id)s AND status IN ('pending', 'running', 'waiting', 'sleeping')
    FOR UPDATE
), cancelled AS (
    UPDATE leased_jobs AS job
    SET status = 'cancelled', finished_at = leased_now(), lease_owner = NULL, lease_expires_at = NULL
    FROM target
    WHERE job.id = target.id
    RETURNING job.*
), recorded AS (
    -- A running attempt's record, from the job row as it was before the cancel cleared its lease.
    INSERT INTO leased_attempts AS a (job_id, attempt, worker_id, started_at, finished_at, outcome, error_message)
    SELECT id, attempt, lease_owner, coalesce(attempt_started_at, leased_now()), leased_now(), 'cancelled',
           'cancelled by a user'
    FROM target WHERE status = 'running'
    ON CONFLICT (job_id, attempt) DO UPDATE
    SET finished_at = excluded.finished_at, outcome = excluded.outcome, error_message = excluded.error_message
    WHERE a.outcome IS NULL
)
SELECT * FROM cancelled;

-- name: migration_lock_timeout
-- A version's statements wait at most this long for a lock (the advisory lock below included),
-- then the runner rolls the version back and tries again: while one waits for ACCESS EXCLUSIVE on
-- leased_jobs, every claim, enqueue and renewal waits behind it (issue 40: 0.9 + 0.5 s with 100,000
-- pending jobs). Django's migrations do not take it: Django runs them, once, as it sees fit.
SET LOCAL lock_timeout = '500ms';

-- name: migration_lock
-- The key is b"leased" as an integer. Advisory locks are per database, so migrators of every
-- schema in it queue behind one another.
SELECT pg_advisory_xact_lock(119182682449252);

-- name: migration_session_lock
-- The same key, held by the session: a migration outside a transaction commits statement by
-- statement, so the transaction's lock above would end with its first.
SELECT pg_advisory_lock(119182682449252);

-- name: migration_session_unlock
SELECT pg_advisory_unlock(119182682449252);

-- name: applied_versions
SELECT version FROM leased_schema_version;

-- name: schema_compatibility
-- Which older code runs on the versions applied (migration 0022): read when the schema is newer
-- than this code.
SELECT version, oldest_code_version FROM leased_schema_compatibility;

-- name: create_version_table
CREATE TABLE IF NOT EXISTS leased_schema_version (
    version integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: oldest_due
-- From the due set and the keyed jobs' partial index, as count_active: no index on all of status.
SELECT queue_name, extract(epoch FROM leased_now() - min(run_after))::float8 AS seconds FROM (
    SELECT queue_name, run_after FROM leased_due WHERE run_after <= leased_now()
    UNION ALL
    SELECT queue_name, run_after FROM leased_jobs
    WHERE status = 'pending' AND concurrency_key IS NOT NULL AND run_after <= leased_now()
) AS due
GROUP BY queue_name;

-- name: finished_since
-- Done and failed per queue since the start of the minute `window_seconds` ago, from the counts
-- kept as jobs finish (migration 0011): the same minutes throughput draws.
SELECT queue_name, sum(done)::bigint AS done, sum(failed)::bigint AS failed FROM leased_throughput
WHERE minute >= date_trunc('minute', leased_now() - make_interval(secs => %(window_seconds)s::float8))
GROUP BY queue_name;

-- name: fused_retry_failed
-- Wakes listening workers once per queue with a retried job, as retry does.
WITH retried AS (
    UPDATE leased_jobs
    SET status = 'pending', run_after = leased_now(), finished_at = NULL, max_attempts = greatest(max_attempts, attempt + 1),
        crashes = least(crashes, max_crashes - 1)
    WHERE status = 'failed'
      AND (%(task_name)s::text IS NULL OR task_name = %(task_name)s::text)
      AND (%(queue_name)s::text IS NULL OR queue_name = %(queue_name)s::text)
    RETURNING id, queue_name, workflow_id
), woke AS (
    SELECT count(pg_notify(left('leased.' || current_schema(), 63), queue_name)) AS queues
    FROM (SELECT DISTINCT queue_name FROM retried) AS due
)
SELECT (SELECT count(*) FROM retried) AS n,
       (SELECT coalesce(array_agg(id), '{}') FROM retried WHERE workflow_id IS NOT NULL) AS steps FROM woke;

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
INSERT INTO leased_workers (id, host, pid, concurrency, queues, tasks, stuck_handlers, children, task_signatures)
VALUES (%(id)s, %(host)s, %(pid)s, %(concurrency)s, %(queues)s::json, %(tasks)s::json, %(stuck_handlers)s,
        %(children)s, %(task_signatures)s)
ON CONFLICT (id) DO UPDATE SET last_seen_at = leased_now(), stuck_handlers = excluded.stuck_handlers,
                               children = excluded.children;

-- name: bury_workers
-- Workers their supervisor saw die (bury_workers): silent from now on, as if for :silent_after
-- seconds, so that the reclaim reads their leases' ends as crashes; shown as gone. Their leases
-- end now, for the reclaim that follows.
WITH buried AS (
    UPDATE leased_workers SET last_seen_at = leased_now() - make_interval(secs => %(silent_after)s::float8 + 1)
    WHERE left(id, length(%(prefix)s::text)) = %(prefix)s::text
)
UPDATE leased_jobs SET lease_expires_at = leased_now()
WHERE status = 'running' AND left(lease_owner, length(%(prefix)s::text)) = %(prefix)s::text;

-- name: prune_workers
DELETE FROM leased_workers WHERE last_seen_at < leased_now() - interval '1 day';

-- name: unregister_worker
DELETE FROM leased_workers WHERE id = %(id)s;

-- name: list_workers
SELECT w.*, extract(epoch FROM leased_now() - w.last_seen_at)::float8 AS silent_seconds,
       (SELECT count(*) FROM leased_jobs AS j WHERE j.status = 'running' AND j.lease_owner = w.id) AS running
FROM leased_workers AS w
ORDER BY w.started_at;

-- name: search_path
-- Where unqualified names are looked up (from the URL's options, the role or the database):
-- named when leased's tables are not found there.
SELECT current_setting('search_path') AS search_path;

-- name: wake_channel
SELECT left('leased.' || current_schema(), 63) AS channel;

-- Explaining one job (`leased why`): read in one transaction with get_job, get_history and
-- list_workers, so that they and now() describe one instant.

-- name: why_snapshot
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY;

-- name: why_now
SELECT leased_now() AS now;

-- name: jobs_ahead
-- Due pending jobs of the job's queue that a claim takes before it, in the claim's order (higher
-- priority, then earlier run_after, then lower id), counted up to the limit given.
SELECT count(*) AS n FROM (
    SELECT 1 FROM leased_jobs AS job
    CROSS JOIN LATERAL (  -- without a key, in the due set; with one, in their partial index
        SELECT priority, run_after, id FROM leased_due
        WHERE queue_name = job.queue_name AND run_after <= leased_now()
        UNION ALL
        SELECT priority, run_after, id FROM leased_jobs
        WHERE status = 'pending' AND concurrency_key IS NOT NULL AND queue_name = job.queue_name
          AND run_after <= leased_now()
    ) AS other
    WHERE job.id = %(job_id)s
      AND other.priority >= job.priority
      AND (other.priority > job.priority OR other.run_after < job.run_after
           OR (other.run_after = job.run_after AND other.id < job.id))
    LIMIT %(limit)s
) AS ahead;

-- name: fused_cancel_pending
-- Every pending job (of one task, or queue) cancelled at once. Pending jobs are never leased: no
-- handler is running, and no attempt record is written.
WITH cancelled AS (
    UPDATE leased_jobs
    SET status = 'cancelled', finished_at = leased_now()
    WHERE status = 'pending' AND id IN (  -- without a key, in the due set; with one, in their partial index
        SELECT id FROM leased_due
        WHERE (%(task_name)s::text IS NULL OR task_name = %(task_name)s::text)
          AND (%(queue_name)s::text IS NULL OR queue_name = %(queue_name)s::text)
        UNION ALL
        SELECT id FROM leased_jobs
        WHERE status = 'pending' AND concurrency_key IS NOT NULL
          AND (%(task_name)s::text IS NULL OR task_name = %(task_name)s::text)
          AND (%(queue_name)s::text IS NULL OR queue_name = %(queue_name)s::text))
    RETURNING id, workflow_id
)
SELECT count(*) AS n,
       coalesce(jsonb_agg(jsonb_build_object('id', id, 'status', 'cancelled', 'workflow_id', workflow_id))
                FILTER (WHERE workflow_id IS NOT NULL), '[]') AS steps
FROM cancelled;

-- name: count_jobs
-- Pending jobs are counted in the due set and the keyed jobs' partial index, which hold their task
-- and queue (no index of leased_jobs holds every pending job: migration 0019); only the branch the
-- status names runs.
SELECT CASE WHEN %(status)s::text = 'pending' THEN
    (SELECT count(*) FROM leased_due
     WHERE (%(task_name)s::text IS NULL OR task_name = %(task_name)s::text)
       AND (%(queue_name)s::text IS NULL OR queue_name = %(queue_name)s::text))
    + (SELECT count(*) FROM leased_jobs
       WHERE status = 'pending' AND concurrency_key IS NOT NULL
         AND (%(task_name)s::text IS NULL OR task_name = %(task_name)s::text)
         AND (%(queue_name)s::text IS NULL OR queue_name = %(queue_name)s::text))
ELSE
    (SELECT count(*) FROM leased_jobs
     WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
       AND (%(task_name)s::text IS NULL OR task_name = %(task_name)s::text)
       AND (%(queue_name)s::text IS NULL OR queue_name = %(queue_name)s::text))
END AS n;

-- name: set_clock_offset
-- The clock seam for this session (see leased_now() in migration 0007); '' is none.
SELECT set_config('leased.clock_offset', %(offset)s, false);

-- name: connection_identity
-- Which server, database and jobs table a connection reaches, however it was addressed (a host
-- name, an address, a socket): a caller's connection= must reach ours. The server's start as
-- epoch seconds, which no session setting changes: a timestamptz arrives naive or aware, in the
-- session's zone, by the client's type loaders (Django's with USE_TZ = False: naive).
SELECT extract(epoch FROM pg_postmaster_start_time()) AS started, current_setting('port') AS port,
       current_database() AS database, to_regclass('leased_jobs')::oid AS jobs_table;

-- name: fused_explain_expired
-- A worker's own account of why it let leases lapse replaces the reclaimer's guess that it
-- "stopped renewing": on the attempts that expiry closed, and on their jobs while no later
-- attempt has begun.
WITH explained AS (
    UPDATE leased_attempts AS a
    SET error_message = %(message)s
    FROM unnest(%(job_ids)s::bigint[], %(attempts)s::int[]) AS given (id, attempt)
    WHERE a.job_id = given.id AND a.attempt = given.attempt AND a.worker_id = %(worker_id)s AND a.outcome = 'expired'
    RETURNING a.job_id, a.attempt
)
UPDATE leased_jobs AS job
SET last_error = 'lease expired: ' || %(message)s
FROM explained
WHERE job.id = explained.job_id AND job.attempt = explained.attempt AND job.status <> 'running';

-- Periodic jobs (backends/sql/schedules.py).

-- name: database_now
SELECT leased_now() AS now;

-- name: list_schedules
-- The last success reads the task's index backwards to its latest done job: one step while it succeeds.
SELECT s.*, j.status AS last_job_status,
       (SELECT d.finished_at FROM leased_jobs AS d
        WHERE d.task_name = s.name AND d.status = 'done' ORDER BY d.id DESC LIMIT 1) AS last_success_at
FROM leased_schedules AS s LEFT JOIN leased_jobs AS j ON j.id = s.last_job_id
ORDER BY s.name;

-- name: ensure_schedule
INSERT INTO leased_schedules (name, expression, timezone) VALUES (%(name)s, %(expression)s, %(timezone)s)
ON CONFLICT (name) DO NOTHING;

-- name: lock_schedule
-- Schedulers of one schedule take turns: the next plans from the last tick this one records.
SELECT * FROM leased_schedules WHERE name = %(name)s FOR UPDATE;

-- name: claim_tick
INSERT INTO leased_schedule_ticks (schedule_name, tick_at) VALUES (%(schedule_name)s, %(tick_at)s)
ON CONFLICT (schedule_name, tick_at) DO NOTHING
RETURNING tick_at;

-- name: job_active
SELECT 1 AS active FROM leased_jobs WHERE id = %(job_id)s AND status IN ('pending', 'running', 'sleeping');

-- name: set_tick_job
UPDATE leased_schedule_ticks SET job_id = %(job_id)s
WHERE schedule_name = %(schedule_name)s AND tick_at = %(tick_at)s;

-- name: update_schedule
-- The last tick never moves back, whatever a worker with an older view of the schedule computed.
UPDATE leased_schedules
SET expression = %(expression)s, timezone = %(timezone)s,
    last_tick_at = greatest(last_tick_at, %(last_tick_at)s::timestamptz),
    last_job_id = %(last_job_id)s, skipped_ticks = skipped_ticks + %(skipped)s,
    last_skipped_at = coalesce(%(last_skipped_at)s::timestamptz, last_skipped_at), updated_at = leased_now()
WHERE name = %(name)s;

-- name: prune_ticks
DELETE FROM leased_schedule_ticks
WHERE schedule_name = %(schedule_name)s
  AND tick_at < (SELECT tick_at FROM leased_schedule_ticks WHERE schedule_name = %(schedule_name)s
                 ORDER BY tick_at DESC LIMIT 1 OFFSET %(keep)s - 1);

-- Limits (0005). The plain claim never takes a job with a key or in a limited queue, so it needs
-- no lock. Limited jobs are taken only by claim_limited, after limited_claim_lock in the same
-- transaction: claims of limited jobs run one at a time, and each statement's snapshot, taken
-- after the lock, sees every running job the one before it claimed. (A lock taken inside the
-- claim statement would come after its snapshot, and two claims could both see the same room.)

-- name: limits_in_use
-- Whether claims must go through claim_limited: a job with a key waits, or a queue has a limit.
SELECT EXISTS (SELECT 1 FROM leased_jobs WHERE status = 'pending' AND concurrency_key IS NOT NULL)
    OR EXISTS (SELECT 1 FROM leased_queue_limits) AS in_use;

-- name: limited_claim_lock
-- Per schema, held until the claim commits.
SELECT pg_advisory_xact_lock(hashtext('leased.limits.' || current_schema()));

-- name: claim_limited
-- Every due job, limited or not, in claim order, within the limits. It reads O(keys + limit) rows:
-- each waiting key is found by skipping through leased_jobs_keyed_due (one probe per key), its room
-- is its cap minus its running jobs (and its starts within the rate window), and only that many of
-- its jobs are read. A key with no room costs one probe however many jobs wait behind it. The key's
-- next job in claim order (its head) carries the key's limits. Jobs without a key come from the due
-- set (migration 0019): limited queues read their own head through leased_due_queue, other queues
-- the head of all as in the plain claim. A paused queue's jobs are left out of all three. Room may
-- be negative after a limit was lowered: nothing is claimed.
WITH RECURSIVE keys (key) AS (
    SELECT min(concurrency_key) FROM leased_jobs WHERE status = 'pending' AND concurrency_key IS NOT NULL
    UNION ALL
    SELECT (SELECT min(concurrency_key) FROM leased_jobs
            WHERE status = 'pending' AND concurrency_key IS NOT NULL AND concurrency_key > keys.key)
    FROM keys WHERE keys.key IS NOT NULL
), key_room AS MATERIALIZED (
    SELECT keys.key, least(
        coalesce(head.key_concurrency - (SELECT count(*) FROM leased_jobs AS r
                                         WHERE r.status = 'running' AND r.concurrency_key = keys.key), %(limit)s),
        coalesce(head.key_rate_count - (SELECT count(*) FROM leased_starts AS s
                                        WHERE s.limit_name = 'key:' || keys.key
                                          AND s.started_at > leased_now() - make_interval(secs => head.key_rate_seconds)),
                 %(limit)s),
        %(limit)s) AS room
    FROM keys CROSS JOIN LATERAL (
        SELECT key_concurrency, key_rate_count, key_rate_seconds FROM leased_jobs
        WHERE status = 'pending' AND concurrency_key = keys.key
        ORDER BY priority DESC, run_after, id
        LIMIT 1
    ) AS head
), queue_room AS (
    SELECT l.queue_name, least(
        coalesce(l.concurrency - (SELECT count(*) FROM leased_jobs AS r
                                  WHERE r.queue_name = l.queue_name AND r.status = 'running'), %(limit)s),
        coalesce(l.rate_count - (SELECT count(*) FROM leased_starts AS s
                                 WHERE s.limit_name = 'queue:' || l.queue_name
                                   AND s.started_at > leased_now() - make_interval(secs => l.rate_seconds)), %(limit)s),
        %(limit)s) AS room
    FROM leased_queue_limits AS l
), candidates AS (
    (SELECT id, priority, run_after, queue_name, task_name FROM leased_due
     WHERE run_after <= leased_now()
       AND task_name = ANY(%(task_names)s::text[])
       AND (%(queue_names)s::text[] IS NULL OR queue_name = ANY(%(queue_names)s::text[]))
       AND queue_name NOT IN (SELECT queue_name FROM leased_queues WHERE paused_at IS NOT NULL)
       AND queue_name NOT IN (SELECT queue_name FROM leased_queue_limits)
     ORDER BY priority DESC, run_after, id
     LIMIT %(limit)s)
    UNION ALL
    SELECT job.* FROM queue_room CROSS JOIN LATERAL (
        SELECT id, priority, run_after, queue_name, task_name FROM leased_due
        WHERE queue_name = queue_room.queue_name
          AND run_after <= leased_now() AND task_name = ANY(%(task_names)s::text[])
          AND (%(queue_names)s::text[] IS NULL OR queue_name = ANY(%(queue_names)s::text[]))
          AND queue_name NOT IN (SELECT queue_name FROM leased_queues WHERE paused_at IS NOT NULL)
        ORDER BY priority DESC, run_after, id
        LIMIT greatest(queue_room.room, 0)
    ) AS job
    UNION ALL
    SELECT job.* FROM key_room CROSS JOIN LATERAL (
        SELECT id, priority, run_after, queue_name, task_name FROM leased_jobs
        WHERE status = 'pending' AND concurrency_key = key_room.key AND run_after <= leased_now()
          AND task_name = ANY(%(task_names)s::text[])
          AND (%(queue_names)s::text[] IS NULL OR queue_name = ANY(%(queue_names)s::text[]))
          AND queue_name NOT IN (SELECT queue_name FROM leased_queues WHERE paused_at IS NOT NULL)
        ORDER BY priority DESC, run_after, id
        LIMIT greatest(key_room.room, 0)
    ) AS job
), ranked AS (
    SELECT candidates.*, row_number() OVER (PARTITION BY queue_name ORDER BY priority DESC, run_after, id) AS place
    FROM candidates
), chosen AS (
    SELECT ranked.id, ranked.priority, ranked.run_after, ranked.queue_name, ranked.task_name
    FROM ranked LEFT JOIN queue_room USING (queue_name)
    WHERE queue_room.queue_name IS NULL OR ranked.place <= queue_room.room
    ORDER BY ranked.priority DESC, ranked.run_after, ranked.id
    LIMIT %(limit)s
), due AS (
    -- A job the plain claim took since the snapshot is no longer pending when its lock is granted.
    -- Each by primary key (LIMIT 1), where a join may hash every pending job; and only where it is
    -- as its candidate row says (migration 0021): a due row left for a job that is gone or moved
    -- claims nothing, as in the plain claim, which deletes such rows.
    SELECT job.id, job.refused FROM chosen CROSS JOIN LATERAL (
        SELECT id, leased_refused_row(attempt, lease_seconds) AS refused FROM leased_jobs
        WHERE id = chosen.id AND status = 'pending'
          AND (priority, run_after, queue_name, task_name)
              = (chosen.priority, chosen.run_after, chosen.queue_name, chosen.task_name)
        LIMIT 1 FOR UPDATE SKIP LOCKED) AS job
), refused AS (
    -- As in the plain claim: a row no enqueue of leased writes is failed with why, not claimed.
    UPDATE leased_jobs AS job SET status = 'failed', finished_at = leased_now(), last_error = due.refused
    FROM due
    WHERE job.id = due.id AND due.refused IS NOT NULL
), claimed AS (
    UPDATE leased_jobs AS job
    SET status = 'running', attempt = job.attempt + 1, lease_owner = %(worker_id)s,
        lease_expires_at = leased_now() + make_interval(secs => job.lease_seconds), attempt_started_at = leased_now()
    FROM due
    WHERE job.id = due.id AND due.refused IS NULL
    RETURNING job.*
), untracked AS (
    -- The claimed jobs' due rows (migration 0018). One a plain claim holds is waited for, not
    -- skipped: that claim could not lock the job (this one had), so it leaves the row, and the
    -- due set must hold no row of a job that is not pending (migration 0019). The plain claim
    -- never waits, so this wait is short and cannot deadlock.
    DELETE FROM leased_due WHERE (generation, priority, run_after, id) IN (
        SELECT due.generation, due.priority, due.run_after, due.id FROM claimed
        CROSS JOIN LATERAL (SELECT generation, priority, run_after, id FROM leased_due
                            WHERE priority = claimed.priority AND run_after = claimed.run_after
                              AND id = claimed.id) AS due)
), started AS (
    INSERT INTO leased_starts (limit_name, started_at)
    SELECT 'key:' || concurrency_key, leased_now() FROM claimed WHERE key_rate_count IS NOT NULL
    UNION ALL
    SELECT 'queue:' || claimed.queue_name, leased_now() FROM claimed
    JOIN leased_queue_limits AS l ON l.queue_name = claimed.queue_name AND l.rate_count IS NOT NULL
), forgotten AS (
    -- Starts older than the longest window (an hour) count for nothing.
    DELETE FROM leased_starts WHERE started_at < leased_now() - interval '1 hour'
), stale AS (
    -- Due rows chosen that do not hold in this snapshot (migration 0021): deleted and counted, as
    -- in the plain claim (stale_due_rows), so that the caller claims again at once. A keyed
    -- candidate has no due row: nothing matches it here.
    DELETE FROM leased_due AS row USING chosen
    WHERE row.id = chosen.id AND row.priority = chosen.priority AND row.run_after = chosen.run_after
      AND NOT EXISTS (SELECT FROM leased_jobs AS job
                      WHERE job.id = chosen.id AND job.status = 'pending' AND job.concurrency_key IS NULL
                        AND (job.priority, job.run_after, job.queue_name, job.task_name)
                            = (chosen.priority, chosen.run_after, chosen.queue_name, chosen.task_name))
    RETURNING row.id
)
SELECT claimed.*, stale.n AS stale_due_rows
FROM (SELECT count(*) AS n FROM stale) AS stale
LEFT JOIN claimed ON true
WHERE claimed.id IS NOT NULL OR stale.n > 0;

-- name: set_queue_limit
INSERT INTO leased_queue_limits (queue_name, concurrency, rate_count, rate_seconds)
VALUES (%(queue_name)s, %(concurrency)s, %(rate_count)s, %(rate_seconds)s)
ON CONFLICT (queue_name) DO UPDATE
SET concurrency = excluded.concurrency, rate_count = excluded.rate_count, rate_seconds = excluded.rate_seconds;

-- name: clear_queue_limit
DELETE FROM leased_queue_limits WHERE queue_name = %(queue_name)s;

-- name: queue_limits
SELECT * FROM leased_queue_limits ORDER BY queue_name;
-- Pausing queues, and pruning finished jobs (migration 0003).

-- name: fused_pause_queue
-- Returns the queue only if this paused it (it was not paused already).
INSERT INTO leased_queues AS q (queue_name, paused_at) VALUES (%(queue_name)s, leased_now())
ON CONFLICT (queue_name) DO UPDATE SET paused_at = leased_now() WHERE q.paused_at IS NULL
RETURNING queue_name;

-- name: fused_resume_queue
-- Wakes listening workers at commit, as a job due now does.
UPDATE leased_queues SET paused_at = NULL WHERE queue_name = %(queue_name)s AND paused_at IS NOT NULL
RETURNING queue_name, pg_notify(left('leased.' || current_schema(), 63), queue_name);

-- name: paused_queues
SELECT queue_name, extract(epoch FROM leased_now() - paused_at)::float8 AS seconds FROM leased_queues
WHERE paused_at IS NOT NULL ORDER BY queue_name;

-- name: try_prune_lock
-- One pruner at a time per schema; a session lock, released by prune_unlock or when the session
-- ends (a killed worker's included).
SELECT pg_try_advisory_lock(1818583405, hashtext(current_schema())) AS locked;

-- name: try_prune_lock_in_transaction
-- try_prune_lock behind a pooler, where a session lock would outlive our use of the session: the
-- same lock, released when the pass's transaction ends (or its client's connection does).
SELECT pg_try_advisory_xact_lock(1818583405, hashtext(current_schema())) AS locked;

-- name: prune_unlock
SELECT pg_advisory_unlock(1818583405, hashtext(current_schema()));

-- name: fused_prune_batch
-- One batch of a rule's finished jobs in one statement: picked oldest first through the
-- finished_at index (a pass with nothing to delete reads only the rows past the cutoff), locked
-- with SKIP LOCKED (a row someone is retrying is theirs; a row that stopped matching, retried
-- meanwhile, is re-checked and left) and deleted with their attempts (ON DELETE CASCADE); they
-- were counted in leased_throughput as they finished. Claimable rows are never read.
WITH picked AS (
    SELECT id FROM leased_jobs
    WHERE finished_at < leased_now() - make_interval(secs => %(older_than)s::float8) AND status = %(status)s::text
      AND (%(task_names)s::text[] IS NULL OR task_name = ANY(%(task_names)s::text[]))
      AND task_name <> ALL(%(except_task_names)s::text[])
      -- A workflow's step goes only once no step of its run can still run.
      AND (workflow_id IS NULL OR NOT EXISTS (
          SELECT 1 FROM leased_jobs AS step WHERE step.workflow_id = leased_jobs.workflow_id
            AND step.status IN ('waiting', 'pending', 'running', 'sleeping')))
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM leased_jobs AS job USING picked
    WHERE job.id = picked.id AND job.status IN ('done', 'failed', 'cancelled')
    RETURNING job.workflow_id
)
SELECT count(*) AS n, coalesce(array_agg(DISTINCT workflow_id) FILTER (WHERE workflow_id IS NOT NULL), '{}')
       AS workflow_ids
FROM deleted;

-- name: count_prunable
SELECT count(*) AS n FROM leased_jobs
WHERE finished_at < leased_now() - make_interval(secs => %(older_than)s::float8) AND status = %(status)s::text
  AND (%(task_names)s::text[] IS NULL OR task_name = ANY(%(task_names)s::text[]))
  AND task_name <> ALL(%(except_task_names)s::text[]);

-- name: prune_throughput
DELETE FROM leased_throughput WHERE minute < leased_now() - make_interval(secs => %(older_than)s::float8);

-- name: fused_fold_throughput
-- The workers' own count rows (migration 0011) of minutes older than :older_than, summed into one
-- row per minute, queue and task (worker_id ''): the sums the readers see are unchanged, and a
-- month of minutes keeps a row per queue and task however many workers ran. Workers count into
-- the current minute, so these rows no longer change; one written late is folded by a later pass.
WITH folded AS (
    DELETE FROM leased_throughput
    WHERE minute < leased_now() - make_interval(secs => %(older_than)s::float8) AND worker_id <> ''
    RETURNING minute, queue_name, task_name, done, failed
), summed AS (
    INSERT INTO leased_throughput AS t (minute, queue_name, task_name, worker_id, done, failed)
    SELECT minute, queue_name, task_name, '', sum(done), sum(failed) FROM folded
    GROUP BY 1, 2, 3
    ORDER BY 1, 2, 3
    ON CONFLICT (minute, queue_name, task_name, worker_id) DO UPDATE
    SET done = t.done + excluded.done, failed = t.failed + excluded.failed
)
SELECT count(*) AS n FROM folded;

-- name: throughput
-- Done and failed jobs per minute, queue and task (or, without :by_task, per minute alone) since
-- the start of the minute `window_seconds` ago, from the counts kept as jobs finish (migration
-- 0011): pruned jobs stay counted.
SELECT extract(epoch FROM minute)::float8 AS minute,
       CASE WHEN %(by_task)s::boolean THEN queue_name END AS queue_name,
       CASE WHEN %(by_task)s::boolean THEN task_name END AS task_name,
       sum(done)::bigint AS done, sum(failed)::bigint AS failed
FROM leased_throughput
WHERE minute >= date_trunc('minute', leased_now() - make_interval(secs => %(window_seconds)s::float8))
GROUP BY 1, 2, 3
ORDER BY 1;

-- Explaining one job, continued (`leased why`): its queue's pause, the limits a claim of it must
-- fit in (counted as claim_limited counts them), and the schedule tick that enqueued it. Read in
-- the same snapshot as why_now.

-- name: why_queue_paused
SELECT paused_at FROM leased_queues WHERE queue_name = %(queue_name)s AND paused_at IS NOT NULL;

-- name: why_queue_limit
SELECT l.concurrency, l.rate_count, l.rate_seconds,
       (SELECT count(*) FROM leased_jobs AS r WHERE r.queue_name = l.queue_name AND r.status = 'running') AS running,
       (SELECT count(*) FROM leased_starts AS s
        WHERE s.limit_name = 'queue:' || l.queue_name
          AND s.started_at > now() - make_interval(secs => l.rate_seconds)) AS starts
FROM leased_queue_limits AS l WHERE l.queue_name = %(queue_name)s;

-- name: why_key_limit
-- The key's limits are its head job's (its next in claim order), as the claim reads them.
SELECT head.key_concurrency AS concurrency, head.key_rate_count AS rate_count, head.key_rate_seconds AS rate_seconds,
       (SELECT count(*) FROM leased_jobs AS r
        WHERE r.status = 'running' AND r.concurrency_key = %(concurrency_key)s) AS running,
       (SELECT count(*) FROM leased_starts AS s
        WHERE s.limit_name = 'key:' || %(concurrency_key)s
          AND s.started_at > now() - make_interval(secs => head.key_rate_seconds)) AS starts
FROM (SELECT key_concurrency, key_rate_count, key_rate_seconds FROM leased_jobs
      WHERE status = 'pending' AND concurrency_key = %(concurrency_key)s
      ORDER BY priority DESC, run_after, id LIMIT 1) AS head;

-- name: why_running_in_queue
SELECT id, lease_owner FROM leased_jobs
WHERE status = 'running' AND queue_name = %(queue_name)s ORDER BY id LIMIT %(limit)s;

-- name: why_running_with_key
SELECT id, lease_owner FROM leased_jobs
WHERE status = 'running' AND concurrency_key = %(concurrency_key)s ORDER BY id LIMIT %(limit)s;

-- name: why_next_slot
-- A full rate window lets one more start once its count-th newest start leaves it.
SELECT started_at + make_interval(secs => %(rate_seconds)s::float8) AS at FROM leased_starts
WHERE limit_name = %(limit_name)s AND started_at > now() - make_interval(secs => %(rate_seconds)s::float8)
ORDER BY started_at DESC LIMIT 1 OFFSET %(rate_count)s::int - 1;

-- name: why_step
-- A workflow step's own row: when it runs, and whether its parents' ends cancelled it (not a person).
SELECT run_when, cancelled_by_parents FROM leased_steps WHERE job_id = %(job_id)s;

-- name: why_schedule_tick
-- A periodic task's name is its schedule's, so the lookup stays within one schedule's ticks.
SELECT schedule_name, tick_at FROM leased_schedule_ticks
WHERE schedule_name = %(task_name)s AND job_id = %(job_id)s;

-- name: old_transactions
-- Sessions of this database whose transaction has held back the vacuum horizon for longer than
-- :older_than seconds: an xid of their own (backend_xid) or a snapshot (backend_xmin) that
-- PostgreSQL must keep every row version newer than. Other databases' sessions hold back only the
-- shared catalogs, not leased's tables. The clock is clock_timestamp(): the reader's own
-- transaction may be older than the statement.
SELECT pid, usename AS user_name, application_name, host(client_addr) AS client_addr, state,
       extract(epoch FROM clock_timestamp() - xact_start)::float8 AS open_seconds,
       left(regexp_replace(coalesce(query, ''), '\s+', ' ', 'g'), %(query_chars)s) AS query
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND (backend_xid IS NOT NULL OR backend_xmin IS NOT NULL)
  AND xact_start < clock_timestamp() - make_interval(secs => %(older_than)s::float8)
ORDER BY xact_start
LIMIT %(limit)s;

-- Workflows (backends/sql/workflows.py). Lists are JSON arrays (jsonb); a step's counters are in
-- leased_steps.

-- name: free_workflow_key
-- A finished run gives up its key, so that enqueueing the same workflow again starts a new one.
UPDATE leased_workflows SET idempotency_key = NULL
WHERE idempotency_key = %(idempotency_key)s AND NOT EXISTS (
    SELECT 1 FROM leased_jobs WHERE workflow_id = leased_workflows.id AND status IN ('waiting', 'pending', 'running', 'sleeping'));

-- name: insert_workflow
-- No row back: an unfinished run holds the key (a concurrent enqueue with it waits for that
-- one's commit, then finds it here).
INSERT INTO leased_workflows (name, idempotency_key, created_at) VALUES (%(name)s, %(idempotency_key)s, leased_now())
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id;

-- name: workflow_with_key
SELECT id FROM leased_workflows WHERE idempotency_key = %(idempotency_key)s;

-- name: step_names
SELECT job_id, name FROM leased_steps WHERE workflow_id = %(workflow_id)s;

-- name: insert_steps
-- Each step [job_id, workflow_id, name, run_when, parents_left, previous_id, added_by].
INSERT INTO leased_steps (job_id, workflow_id, name, run_when, parents_left, previous_id, added_by)
SELECT (step ->> 0)::bigint, (step ->> 1)::bigint, step ->> 2, step ->> 3, (step ->> 4)::int,
       (step ->> 5)::bigint, (step ->> 6)::bigint
FROM jsonb_array_elements(%(steps)s::jsonb) AS steps (step);

-- name: insert_dependencies
-- Each edge [parent_id, child_id].
INSERT INTO leased_dependencies (parent_id, child_id)
SELECT (edge ->> 0)::bigint, (edge ->> 1)::bigint FROM jsonb_array_elements(%(edges)s::jsonb) AS edges (edge)
ON CONFLICT DO NOTHING;

-- name: lock_running_step
-- The step adding steps, fenced on its lease, locked: its end waits for this transaction.
SELECT id, workflow_id FROM leased_jobs
WHERE id = %(job_id)s AND attempt = %(attempt)s AND lease_owner = %(worker_id)s AND status = 'running'
FOR UPDATE;

-- name: lock_steps_of_run
-- Steps named in a new step's after=, of this run only, locked: one ending now commits first (and
-- is seen ended) or waits, and then counts the new edges.
SELECT id, status FROM leased_jobs
WHERE id IN (SELECT value::bigint FROM jsonb_array_elements_text(%(job_ids)s::jsonb)) AND workflow_id = %(workflow_id)s
ORDER BY id
FOR UPDATE;

-- name: children_of
SELECT child_id FROM leased_dependencies WHERE parent_id = %(job_id)s;

-- name: lock_children
-- One row per edge from the given steps to a child, with the child's counters and status; the
-- children's step and job rows are locked, in id order, so two parents' ends count one after the
-- other: a locking read sees the other's committed count and status (both rows locked: a row
-- that is joined but not locked keeps the version from before the wait, and a child another end
-- had just cancelled would look waiting still, and be cancelled and cascaded twice).
SELECT d.parent_id, s.job_id, s.parents_left, s.parents_failed, s.run_when, s.cancelled_by_parents, j.status
FROM jsonb_array_elements_text(%(job_ids)s::jsonb) AS ids (value)
JOIN leased_dependencies AS d ON d.parent_id = ids.value::bigint
JOIN leased_steps AS s ON s.job_id = d.child_id
JOIN leased_jobs AS j ON j.id = s.job_id
ORDER BY s.job_id
FOR UPDATE OF s, j;

-- name: count_parents
-- Each [child_id, parents ended, of them failed]: negative to count them back (a retry).
UPDATE leased_steps AS s
SET parents_left = s.parents_left - (c ->> 1)::int, parents_failed = greatest(s.parents_failed + (c ->> 2)::int, 0)
FROM jsonb_array_elements(%(counts)s::jsonb) AS counts (c)
WHERE s.job_id = (c ->> 0)::bigint;

-- name: names_of_steps
SELECT s.job_id, s.name FROM jsonb_array_elements_text(%(job_ids)s::jsonb) AS ids (value) JOIN leased_steps AS s ON s.job_id = ids.value::bigint;

-- name: previous_results
-- A chain's steps about to be released, with their arguments and the previous step's result.
SELECT s.job_id, j.args, previous.result FROM jsonb_array_elements_text(%(job_ids)s::jsonb) AS ids (value)
JOIN leased_steps AS s ON s.job_id = ids.value::bigint
JOIN leased_jobs AS j ON j.id = s.job_id
JOIN leased_jobs AS previous ON previous.id = s.previous_id;

-- name: set_args
UPDATE leased_jobs AS job SET args = (given ->> 1)::json
FROM jsonb_array_elements(%(steps)s::jsonb) AS steps (given)
WHERE job.id = (given ->> 0)::bigint AND job.status = 'waiting';

-- name: release_steps
-- Due now: listening workers hear of them at commit, as of an enqueue.
WITH released AS (
    UPDATE leased_jobs AS job SET status = 'pending', run_after = leased_now()
    FROM jsonb_array_elements_text(%(job_ids)s::jsonb) AS ids (value)
    WHERE job.id = ids.value::bigint AND job.status = 'waiting'
    RETURNING job.queue_name
)
SELECT queue_name, pg_notify(left('leased.' || current_schema(), 63), queue_name) AS woke
FROM (SELECT DISTINCT queue_name FROM released) AS due;

-- name: cancel_steps
-- Each [job_id, reason]: cancelled in its parents' name, which a retry of the parent undoes.
UPDATE leased_jobs AS job SET status = 'cancelled', finished_at = leased_now(), last_error = given ->> 1
FROM jsonb_array_elements(%(steps)s::jsonb) AS steps (given)
WHERE job.id = (given ->> 0)::bigint AND job.status = 'waiting';

-- name: mark_cancelled_by_parents
UPDATE leased_steps AS s SET cancelled_by_parents = true FROM jsonb_array_elements_text(%(job_ids)s::jsonb) AS ids (value) WHERE s.job_id = ids.value::bigint;

-- name: uncancel_steps
UPDATE leased_steps AS s SET cancelled_by_parents = false FROM jsonb_array_elements_text(%(job_ids)s::jsonb) AS ids (value) WHERE s.job_id = ids.value::bigint;

-- name: rewait_steps
UPDATE leased_jobs AS job SET status = 'waiting'
FROM jsonb_array_elements_text(%(job_ids)s::jsonb) AS ids (value), leased_steps AS s
WHERE job.id = ids.value::bigint AND s.job_id = job.id AND job.status = 'pending'
  AND s.parents_left > 0 AND s.parents_failed = 0;

-- name: revive_steps
UPDATE leased_jobs AS job SET status = 'waiting', finished_at = NULL, last_error = NULL
FROM jsonb_array_elements_text(%(job_ids)s::jsonb) AS ids (value)
WHERE job.id = ids.value::bigint AND job.status = 'cancelled';

-- name: unfinished_steps
SELECT id, attempt, lease_owner, status FROM leased_jobs
WHERE workflow_id = %(workflow_id)s AND status IN ('waiting', 'pending', 'running', 'sleeping')
ORDER BY id
FOR UPDATE;

-- name: record_attempts
-- An attempt's record, written once as it ends, from what the claim wrote in the job row: before
-- the job row's own end, in its transaction (a workflow's cancel, and the shared sequence's verbs;
-- the fused ones write theirs in their own statements). :ends is a JSON array of [job_id, attempt,
-- worker_id, outcome, error_type, error_message, traceback, progress, handler_outlived_limit (0 or
-- 1; absent: not known), trace_context (the attempt's span; absent: untraced)], fenced on the lease as the rest; untold progress is the attempt's latest
-- report, as its last renewal wrote it.
INSERT INTO leased_attempts AS a (job_id, attempt, worker_id, started_at, finished_at, outcome, error_type,
                                  error_message, traceback, progress, handler_outlived_limit, trace_context)
SELECT job.id, job.attempt, job.lease_owner, coalesce(job.attempt_started_at, leased_now()), leased_now(),
       e ->> 3, e ->> 4, e ->> 5, e ->> 6,
       coalesce(e ->> 7, CASE WHEN job.progress LIKE '%%"attempt": ' || job.attempt || '}' THEN job.progress END),
       (e ->> 8)::int::boolean, e ->> 9
FROM jsonb_array_elements(%(ends)s::jsonb) AS ends (e)
JOIN leased_jobs AS job ON job.id = (e ->> 0)::bigint
WHERE job.attempt = (e ->> 1)::int AND job.lease_owner = e ->> 2 AND job.status = 'running'
ON CONFLICT (job_id, attempt) DO UPDATE
SET finished_at = excluded.finished_at, outcome = excluded.outcome, error_type = excluded.error_type,
    error_message = excluded.error_message, traceback = excluded.traceback, progress = excluded.progress,
    handler_outlived_limit = excluded.handler_outlived_limit, trace_context = excluded.trace_context
WHERE a.outcome IS NULL;

-- name: cancel_unfinished_steps
UPDATE leased_jobs AS job
SET status = 'cancelled', finished_at = leased_now(), lease_owner = NULL, lease_expires_at = NULL,
    last_error = 'workflow cancelled'
FROM jsonb_array_elements_text(%(job_ids)s::jsonb) AS ids (value)
WHERE job.id = ids.value::bigint AND job.status IN ('waiting', 'pending', 'running', 'sleeping');

-- name: failed_steps
SELECT id, queue_name FROM leased_jobs WHERE workflow_id = %(workflow_id)s AND status = 'failed' FOR UPDATE;

-- name: retry_jobs
WITH retried AS (
    UPDATE leased_jobs
    SET status = 'pending', run_after = leased_now(), finished_at = NULL,
        max_attempts = greatest(max_attempts, attempt + 1),
        crashes = least(crashes, max_crashes - 1)
    WHERE id = ANY(%(job_ids)s::bigint[]) AND status = 'failed'
    RETURNING queue_name
)
SELECT queue_name, pg_notify(left('leased.' || current_schema(), 63), queue_name) AS woke
FROM (SELECT DISTINCT queue_name FROM retried) AS due;

-- name: get_workflow
SELECT * FROM leased_workflows WHERE id = %(workflow_id)s;

-- name: workflow_steps
SELECT s.job_id, s.name, s.run_when, s.parents_left, s.added_by, s.cancelled_by_parents, j.task_name,
       j.queue_name, j.status, j.attempt, j.max_attempts, j.created_at, j.finished_at, j.result, j.last_error
FROM leased_steps AS s JOIN leased_jobs AS j ON j.id = s.job_id
WHERE s.workflow_id = %(workflow_id)s
ORDER BY s.job_id;

-- name: workflow_edges
SELECT d.parent_id, d.child_id FROM leased_steps AS s JOIN leased_dependencies AS d ON d.child_id = s.job_id
WHERE s.workflow_id = %(workflow_id)s;

-- name: list_workflows
SELECT * FROM leased_workflows
WHERE (%(before_id)s::bigint IS NULL OR id < %(before_id)s::bigint)
  AND (%(workflow_name)s::text IS NULL OR name = %(workflow_name)s::text)
ORDER BY id DESC LIMIT %(limit)s;

-- name: workflow_counts
-- Steps per status of each run, how many were skipped as their `when` asked, and its open ends:
-- steps no other step waits for that did not end done (nor skipped); and the compensation steps that
-- ran. runs.workflow_status reads them.
SELECT j.workflow_id, j.status, count(*) AS n,
       count(*) FILTER (WHERE s.cancelled_by_parents AND s.run_when = 'failed' AND j.status = 'cancelled') AS skipped,
       count(*) FILTER (WHERE j.status <> 'done' AND NOT (s.cancelled_by_parents AND s.run_when = 'failed' AND j.status = 'cancelled')
           AND NOT EXISTS (SELECT 1 FROM leased_dependencies AS d WHERE d.parent_id = j.id)) AS open_ends,
       count(*) FILTER (WHERE s.run_when = 'failed' AND j.status <> 'cancelled') AS compensations_run
FROM jsonb_array_elements_text(%(workflow_ids)s::jsonb) AS ids (value)
JOIN leased_jobs AS j ON j.workflow_id = ids.value::bigint JOIN leased_steps AS s ON s.job_id = j.id
GROUP BY j.workflow_id, j.status;

-- name: parents_of
-- With the trace context of each parent's last attempt, which a traced step's attempt links to.
SELECT s.name, p.id AS job_id, p.status, p.result, p.last_error,
       (SELECT a.trace_context FROM leased_attempts AS a WHERE a.job_id = p.id AND a.attempt = p.attempt) AS trace_context
FROM leased_dependencies AS d JOIN leased_jobs AS p ON p.id = d.parent_id JOIN leased_steps AS s ON s.job_id = p.id
WHERE d.child_id = %(job_id)s
ORDER BY p.id;

-- name: delete_empty_workflows
DELETE FROM leased_workflows
WHERE id = ANY(%(workflow_ids)s::bigint[]) AND NOT EXISTS (SELECT 1 FROM leased_jobs WHERE workflow_id = leased_workflows.id);

-- Durable steps (TaskContext.step; migration 0014). Recorded after lease_fence, in its transaction
-- (a transactional handler's too: the statement's clock, as lease_fence reads it).
-- name: record_durable_step
INSERT INTO leased_durable_steps (job_id, name, attempt, result, started_at, finished_at)
VALUES (%(job_id)s, %(name)s, %(attempt)s, %(result)s::json,
        leased_now() + (statement_timestamp() - now()) - make_interval(secs => %(seconds)s::float8),
        leased_now() + (statement_timestamp() - now()));

-- name: durable_steps
SELECT name, attempt, result, started_at, finished_at FROM leased_durable_steps
WHERE job_id = %(job_id)s ORDER BY started_at, name;

-- The shared sequence (backends/sql/): the write verbs as the named statements of one transaction,
-- as SQLite and MariaDB run them. A PostgresBackend runs its fused_* statements instead (fused.py),
-- and these when built with fused=False, as the conformance suite builds one so that the two never
-- drift (tests/conformance/test_postgres_fused.py). Leases, ends and counts come as JSON arrays (jsonb), as the
-- shared code writes them, in job id order; rows are locked in that order, as the fused ones are.

-- name: renew
WITH held AS (
    SELECT job.id FROM leased_jobs AS job
    JOIN jsonb_array_elements(%(leases)s::jsonb) AS given (l)
      ON job.id = (l ->> 0)::bigint AND job.attempt = (l ->> 1)::int
    WHERE job.status = 'running' AND job.lease_owner = %(worker_id)s::text AND job.lease_expires_at > leased_now()
    ORDER BY job.id
    FOR UPDATE OF job
)
UPDATE leased_jobs AS job
SET lease_expires_at = leased_now() + make_interval(secs => job.lease_seconds)
FROM held
WHERE job.id = held.id;

-- name: record_progress
-- :progress is a JSON array of [job_id, attempt, progress] (TaskContext.progress), with a renewal.
UPDATE leased_jobs AS job
SET progress = r ->> 2
FROM jsonb_array_elements(%(progress)s::jsonb) AS reported (r)
WHERE job.id = (r ->> 0)::bigint AND job.attempt = (r ->> 1)::int AND job.lease_owner = %(worker_id)s::text
  AND job.status = 'running';

-- name: held_leases
-- Of the given leases, those the worker holds unexpired: after renew, the ones it renewed.
SELECT job.id, job.attempt FROM leased_jobs AS job
JOIN jsonb_array_elements(%(leases)s::jsonb) AS given (l)
  ON job.id = (l ->> 0)::bigint AND job.attempt = (l ->> 1)::int
WHERE job.status = 'running' AND job.lease_owner = %(worker_id)s::text AND job.lease_expires_at > leased_now();

-- name: leases_to_finish
-- Of the given leases, those the worker still holds, expired or not, locked: the ends finish may write.
SELECT job.id, job.attempt, job.queue_name, job.task_name, job.workflow_id FROM leased_jobs AS job
JOIN jsonb_array_elements(%(leases)s::jsonb) AS given (l)
  ON job.id = (l ->> 0)::bigint AND job.attempt = (l ->> 1)::int
WHERE job.status = 'running' AND job.lease_owner = %(worker_id)s::text
ORDER BY job.id
FOR UPDATE OF job;

-- name: finish
-- :ends is a JSON array of [job_id, attempt, worker_id, status, result, last_error, retry_in_seconds,
-- progress, outcome]; each end is fenced on its lease, so one whose lease was lost matches nothing.
UPDATE leased_jobs AS job
SET status = e ->> 3,
    result = (e ->> 4)::json,
    last_error = coalesce(e ->> 5, job.last_error),
    finished_at = CASE WHEN e ->> 3 = 'pending' THEN NULL ELSE leased_now() END,
    run_after = CASE WHEN e ->> 3 = 'pending' THEN leased_now() + make_interval(secs => (e ->> 6)::float8)
                     ELSE job.run_after END,
    lease_owner = NULL,
    lease_expires_at = NULL,
    progress = coalesce(e ->> 7, job.progress),
    crashes = job.crashes + (e ->> 8 IS NOT DISTINCT FROM 'crashed')::int
FROM jsonb_array_elements(%(ends)s::jsonb) AS ends (e)
WHERE job.id = (e ->> 0)::bigint AND job.attempt = (e ->> 1)::int AND job.lease_owner = e ->> 2
  AND job.status = 'running';

-- name: count_finished
-- :counts is a JSON array of [queue_name, task_name, worker_id, done, failed], in key order.
INSERT INTO leased_throughput AS t (minute, queue_name, task_name, worker_id, done, failed)
SELECT date_trunc('minute', leased_now()), c ->> 0, c ->> 1, c ->> 2, (c ->> 3)::int, (c ->> 4)::int
FROM jsonb_array_elements(%(counts)s::jsonb) AS counts (c)
ON CONFLICT (minute, queue_name, task_name, worker_id) DO UPDATE
SET done = t.done + excluded.done, failed = t.failed + excluded.failed;

-- name: release
UPDATE leased_jobs AS job
SET status = 'pending', run_after = leased_now(), lease_owner = NULL, lease_expires_at = NULL
FROM jsonb_array_elements(%(leases)s::jsonb) AS given (l)
WHERE job.id = (l ->> 0)::bigint AND job.attempt = (l ->> 1)::int AND job.status = 'running'
  AND job.lease_owner = %(worker_id)s::text;

-- name: explain_expired_jobs
-- Run before explain_expired_attempts, whose rows it finds unexplained.
UPDATE leased_jobs AS job
SET last_error = 'lease expired: ' || %(message)s::text
FROM leased_attempts AS a, jsonb_array_elements(%(leases)s::jsonb) AS given (l)
WHERE a.job_id = (l ->> 0)::bigint AND a.attempt = (l ->> 1)::int AND a.worker_id = %(worker_id)s::text
  AND a.outcome = 'expired' AND job.id = a.job_id AND job.attempt = a.attempt AND job.status <> 'running';

-- name: explain_expired_attempts
UPDATE leased_attempts AS a
SET error_message = %(message)s::text
FROM jsonb_array_elements(%(leases)s::jsonb) AS given (l)
WHERE a.job_id = (l ->> 0)::bigint AND a.attempt = (l ->> 1)::int AND a.worker_id = %(worker_id)s::text
  AND a.outcome = 'expired';

-- name: expired_ids
-- Expired leases, locked (rows a claim or another reclaimer holds are left to it), with what
-- record_attempts needs: it writes the records before reclaim_expired clears the leases.
SELECT id, attempt, lease_owner, queue_name, task_name, workflow_id, max_attempts, crashes, max_crashes,
       EXISTS (SELECT FROM leased_workers AS w
               WHERE w.id = job.lease_owner
                 AND w.last_seen_at <= leased_now() - make_interval(secs => %(silent_after)s::float8)) AS gone
FROM leased_jobs AS job
WHERE status = 'running' AND lease_expires_at <= leased_now()
ORDER BY id
FOR UPDATE SKIP LOCKED;

-- name: reclaim_expired
-- The job's last error is its expired attempt's, just recorded; an attempt recorded as crashed
-- adds to its crashes, and the crash that reaches max_crashes fails it as a poison job.
UPDATE leased_jobs AS job
SET status = CASE WHEN job.attempt >= job.max_attempts
                       OR (a.outcome = 'crashed' AND job.crashes + 1 >= job.max_crashes) THEN 'failed'
                  ELSE 'pending' END,
    finished_at = CASE WHEN job.attempt >= job.max_attempts
                            OR (a.outcome = 'crashed' AND job.crashes + 1 >= job.max_crashes) THEN leased_now() END,
    last_error = CASE WHEN a.outcome = 'crashed' AND job.crashes + 1 >= job.max_crashes
                      THEN 'quarantined after ' || (job.crashes + 1)
                           || CASE WHEN job.crashes = 0 THEN ' crash: ' ELSE ' crashes: ' END || a.error_message
                      ELSE a.error_message END,
    crashes = job.crashes + (a.outcome IS NOT DISTINCT FROM 'crashed')::int,
    run_after = leased_now(),
    lease_owner = NULL,
    lease_expires_at = NULL
FROM leased_attempts AS a
WHERE a.job_id = job.id AND a.attempt = job.attempt AND job.id = ANY(%(job_ids)s::bigint[])
  AND job.status = 'running';

-- name: expire_leases_of
-- Their leases end now, for the reclaim in the same transaction (bury_workers ended them already).
UPDATE leased_jobs SET lease_expires_at = leased_now()
WHERE status = 'running' AND left(lease_owner, length(%(prefix)s::text)) = %(prefix)s::text
  AND lease_expires_at > leased_now();

-- name: lock_for_retry
SELECT id, queue_name, workflow_id FROM leased_jobs WHERE id = %(job_id)s AND status IN ('failed', 'cancelled')
FOR UPDATE;

-- name: retry
-- A retried job is due now: it wakes listening workers at commit, as fused_retry does.
WITH retried AS (
    UPDATE leased_jobs
    SET status = 'pending', run_after = leased_now(), finished_at = NULL,
        max_attempts = greatest(max_attempts, attempt + 1), crashes = least(crashes, max_crashes - 1)
    WHERE id = %(job_id)s AND status IN ('failed', 'cancelled')
    RETURNING queue_name
)
SELECT pg_notify(left('leased.' || current_schema(), 63), queue_name) AS woke FROM retried;

-- name: lock_for_cancel
-- A running job's attempt and worker come along: its record is written before cancel clears them.
SELECT id, attempt, lease_owner, status, workflow_id FROM leased_jobs
WHERE id = %(job_id)s AND status IN ('pending', 'running', 'waiting', 'sleeping')
FOR UPDATE;

-- name: cancel
UPDATE leased_jobs
SET status = 'cancelled', finished_at = leased_now(), lease_owner = NULL, lease_expires_at = NULL
WHERE id = %(job_id)s AND status IN ('pending', 'running', 'waiting', 'sleeping');

-- name: failed_to_retry
SELECT id, queue_name, workflow_id FROM leased_jobs
WHERE status = 'failed'
  AND (%(task_name)s::text IS NULL OR task_name = %(task_name)s::text)
  AND (%(queue_name)s::text IS NULL OR queue_name = %(queue_name)s::text)
ORDER BY id
FOR UPDATE;

-- name: pending_to_cancel
-- A job a claim holds locked is waited for, and left out once claimed.
SELECT id, attempt, workflow_id FROM leased_jobs
WHERE status = 'pending'
  AND (%(task_name)s::text IS NULL OR task_name = %(task_name)s::text)
  AND (%(queue_name)s::text IS NULL OR queue_name = %(queue_name)s::text)
ORDER BY id
FOR UPDATE;

-- name: cancel_jobs
UPDATE leased_jobs SET status = 'cancelled', finished_at = leased_now()
WHERE id = ANY(%(job_ids)s::bigint[]) AND status = 'pending';

-- name: ensure_queue
INSERT INTO leased_queues (queue_name, paused_at) VALUES (%(queue_name)s, NULL)
ON CONFLICT (queue_name) DO NOTHING;

-- name: pause_queue
-- Changes a row only if this paused the queue (it was not paused already).
UPDATE leased_queues SET paused_at = leased_now() WHERE queue_name = %(queue_name)s AND paused_at IS NULL;

-- name: resume_queue
-- A row per queue resumed; wakes listening workers at commit, as fused_resume_queue does.
WITH resumed AS (
    UPDATE leased_queues SET paused_at = NULL WHERE queue_name = %(queue_name)s AND paused_at IS NOT NULL
    RETURNING queue_name
)
SELECT queue_name, pg_notify(left('leased.' || current_schema(), 63), queue_name) AS woke FROM resumed;

-- name: prunable_ids
-- One batch of a rule's finished jobs, oldest first through the finished_at index, locked (a row
-- someone is retrying is theirs). A workflow's step goes only once no step of its run can still run.
SELECT id, workflow_id FROM leased_jobs
WHERE finished_at < leased_now() - make_interval(secs => %(older_than)s::float8) AND status = %(status)s::text
  AND (%(task_names)s::text[] IS NULL OR task_name = ANY(%(task_names)s::text[]))
  AND task_name <> ALL(%(except_task_names)s::text[])
  AND (workflow_id IS NULL OR NOT EXISTS (
      SELECT 1 FROM leased_jobs AS step WHERE step.workflow_id = leased_jobs.workflow_id
        AND step.status IN ('waiting', 'pending', 'running', 'sleeping')))
ORDER BY finished_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: delete_jobs
-- Their attempts go with them (ON DELETE CASCADE); only finished rows.
DELETE FROM leased_jobs WHERE id = ANY(%(ids)s::bigint[]) AND status IN ('done', 'failed', 'cancelled');

-- name: throughput_cutoff
SELECT leased_now() - make_interval(secs => %(older_than)s::float8) AS cutoff;

-- name: fold_throughput
INSERT INTO leased_throughput AS t (minute, queue_name, task_name, worker_id, done, failed)
SELECT minute, queue_name, task_name, '', sum(done), sum(failed) FROM leased_throughput
WHERE minute < %(cutoff)s AND worker_id <> ''
GROUP BY minute, queue_name, task_name
ORDER BY minute, queue_name, task_name
ON CONFLICT (minute, queue_name, task_name, worker_id) DO UPDATE
SET done = t.done + excluded.done, failed = t.failed + excluded.failed;

-- name: delete_folded
DELETE FROM leased_throughput WHERE minute < %(cutoff)s AND worker_id <> '';

-- name: nudge
-- app.wake_workers: every listening worker looks at these queues now, with no commit to carry it.
SELECT pg_notify(left('leased.' || current_schema(), 63), queue_name) AS woke
FROM unnest(%(queue_names)s::text[]) AS queue_name;

-- Jobs that wait (backends/sql/waits.py, migration 0026). Now is the statement's, as lease_fence's.
-- name: wait_ends_at
-- A wait's end by the database's clock: the end recorded when it first began (:until), else
-- :seconds from now, else NULL (a signal with no timeout); and whether it has come.
SELECT ends_at, ends_at <= leased_now() + (statement_timestamp() - now()) AS due
FROM (SELECT coalesce(to_timestamp(%(until)s::float8),
                      leased_now() + (statement_timestamp() - now()) + make_interval(secs => %(seconds)s::float8))
             AS ends_at) AS wait;

-- name: oldest_signal
SELECT id, payload FROM leased_signals
WHERE job_id = %(job_id)s AND name = %(name)s AND taken_by_attempt IS NULL ORDER BY id LIMIT 1
FOR UPDATE;

-- name: take_signal
UPDATE leased_signals SET taken_by_attempt = %(attempt)s, taken_at = leased_now() + (statement_timestamp() - now())
WHERE id = %(id)s AND taken_by_attempt IS NULL;

-- name: begin_wait
-- The attempt ends waiting, fenced on its lease (begin_wait's fence holds the row). max_attempts
-- grows by one: the attempt a wait ends does not count against it.
UPDATE leased_jobs
SET status = 'sleeping', lease_owner = NULL, lease_expires_at = NULL, max_attempts = max_attempts + 1
WHERE id = %(job_id)s AND attempt = %(attempt)s AND lease_owner = %(worker_id)s AND status = 'running';

-- name: set_wait
INSERT INTO leased_waits (job_id, signal_name, since, wake_at)
VALUES (%(job_id)s, %(signal_name)s, leased_now() + (statement_timestamp() - now()), %(wake_at)s)
ON CONFLICT (job_id) DO UPDATE SET signal_name = excluded.signal_name, since = excluded.since, wake_at = excluded.wake_at;

-- name: due_waits
-- Through leased_waits_wake_at: the range of waits whose end has come, and no other. A wait another
-- waker holds is skipped: that one wakes its job.
SELECT job_id FROM leased_waits
WHERE wake_at IS NOT NULL AND wake_at <= leased_now() + (statement_timestamp() - now()) ORDER BY wake_at
LIMIT %(limit)s FOR UPDATE SKIP LOCKED;

-- name: wake_jobs
-- Sleeping jobs made pending, due now (the due set's trigger adds their rows). :job_ids is a JSON array.
-- Each wakes the workers listening for its queue at commit, as an enqueue does: a signal's job
-- starts at once, in the sender's transaction or ours.
UPDATE leased_jobs SET status = 'pending', run_after = leased_now()
WHERE id = ANY(ARRAY(SELECT json_array_elements_text(%(job_ids)s::json)::bigint)) AND status = 'sleeping'
RETURNING pg_notify(left('leased.' || current_schema(), 63), queue_name) AS woke;

-- name: end_waits
-- The waits of jobs just woken. Of those due_waits read, only the ones still due: a job woken by
-- its signal meanwhile, which began a later wait, keeps that one.
DELETE FROM leased_waits
WHERE job_id = ANY(ARRAY(SELECT json_array_elements_text(%(job_ids)s::json)::bigint))
  AND (%(due_only)s = 0 OR wake_at <= leased_now() + (statement_timestamp() - now()));

-- name: lock_for_signal
SELECT id, status, queue_name FROM leased_jobs WHERE id = %(job_id)s FOR UPDATE;

-- name: job_with_key
-- The job an idempotency key names: its latest (an ended job's key may be taken again).
SELECT id FROM leased_jobs WHERE idempotency_key = %(key)s ORDER BY id DESC LIMIT 1;

-- name: insert_signal
INSERT INTO leased_signals (job_id, name, payload, sent_at)
VALUES (%(job_id)s, %(name)s, %(payload)s::json, leased_now() + (statement_timestamp() - now()))
RETURNING id, job_id, name, payload, sent_at, taken_by_attempt, taken_at;

-- name: job_wait
SELECT job_id, signal_name, since, wake_at FROM leased_waits WHERE job_id = %(job_id)s;

-- name: job_signals
SELECT id, job_id, name, payload, sent_at, taken_by_attempt, taken_at FROM leased_signals
WHERE job_id = %(job_id)s ORDER BY id;
