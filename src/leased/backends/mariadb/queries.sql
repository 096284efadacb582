-- Named queries of the MariaDB backend (MariaDB 10.6+: JSON_TABLE, SKIP LOCKED, INSERT ... RETURNING; not MySQL, see server_version).
-- Parameters are %(name)s (MySQLdb's style). Times are epoch seconds from the server's clock,
-- leased_now(): UNIX_TIMESTAMP(NOW(6)) plus the session's clock seam offset @leased_clock_offset (see
-- leased.clock), written out when the backend loads this file; one reading per statement, with
-- microseconds. Lists arrive as JSON arrays and are read through JSON_TABLE. UPDATE has no RETURNING here: the backend locks the
-- rows it will change (FOR UPDATE [SKIP LOCKED]), changes them by id, and reads them back, in one
-- READ COMMITTED transaction.

-- name: server_version
-- Read once by a backend's first connection: MySQL, and MariaDB before 10.6, are refused by name;
-- and the largest statement the server takes, which an enqueue checks before it sends one.
SELECT VERSION(), @@max_allowed_packet;

-- name: set_clock_offset
-- The clock seam for this session (see leased.clock); 0 is none.
SET @leased_clock_offset = %(offset)s;

-- name: insert_jobs
-- A batch in one statement; each job a JSON array as on SQLite (see sql/enqueue.py, jobs_json). Not
-- INSERT IGNORE: it turns every strict-mode error into a warning (a long name stored cut, a count
-- clamped). A key a pending job holds is the unique index's duplicate-key error, which the backend
-- catches by the index's name (backend.py, _insert_rows). JSON_TABLE reads text and integers as
-- LONGTEXT: a narrower column of its own would cut or clamp the value with a mere warning, where the
-- insert into the table's column refuses it. Rows are inserted in the batch's order, so
-- AUTO_INCREMENT gives ids in that order.
INSERT INTO leased_jobs (task_name, queue_name, args, kwargs, priority, max_attempts, lease_seconds,
                                run_after, created_at, idempotency_key, timeout_seconds, concurrency_key,
                                key_concurrency, key_rate_count, key_rate_seconds, status, workflow_id, isolation,
                                max_crashes, trace_context)
SELECT j.task_name, j.queue_name, j.args, j.kwargs, j.priority, j.max_attempts, j.lease_seconds,
       COALESCE(j.run_at, leased_now() + j.delay_seconds), leased_now(), j.idempotency_key,
       j.timeout_seconds, j.concurrency_key, j.key_concurrency, j.key_rate_count, j.key_rate_seconds,
       j.status, j.workflow_id, j.isolation, j.max_crashes, j.trace_context
FROM JSON_TABLE(%(jobs)s, '$[*]' COLUMNS (
    position FOR ORDINALITY,
    task_name LONGTEXT PATH '$[0]', queue_name LONGTEXT PATH '$[1]', args LONGTEXT PATH '$[2]',
    kwargs LONGTEXT PATH '$[3]', priority LONGTEXT PATH '$[4]', max_attempts LONGTEXT PATH '$[5]',
    lease_seconds DOUBLE PATH '$[6]', run_at DOUBLE PATH '$[7]', delay_seconds DOUBLE PATH '$[8]',
    idempotency_key LONGTEXT PATH '$[9]', timeout_seconds DOUBLE PATH '$[10]',
    concurrency_key LONGTEXT PATH '$[11]', key_concurrency LONGTEXT PATH '$[12]', key_rate_count LONGTEXT PATH '$[13]',
    key_rate_seconds DOUBLE PATH '$[14]', status LONGTEXT PATH '$[15]', workflow_id LONGTEXT PATH '$[16]',
    isolation LONGTEXT PATH '$[17]', max_crashes LONGTEXT PATH '$[18]',
    trace_context LONGTEXT PATH '$[19]')) AS j
ORDER BY j.position
RETURNING id, run_after, created_at, idempotency_key;

-- name: insert_job
-- One job, as insert_jobs would insert it, without a batch to build and parse (see
-- sql/enqueue.py, insert_statement): what most enqueues are. A VALUES row is a simple insert to InnoDB,
-- which takes no table lock for its AUTO_INCREMENT value; NOW(6) is one time per statement. A held
-- key is a duplicate-key error, as for insert_jobs.
INSERT INTO leased_jobs (task_name, queue_name, args, kwargs, priority, max_attempts, lease_seconds,
                                run_after, created_at, idempotency_key, timeout_seconds, concurrency_key,
                                key_concurrency, key_rate_count, key_rate_seconds, status, workflow_id, isolation,
                                max_crashes, trace_context)
VALUES (%(task_name)s, %(queue_name)s, %(args_json)s, %(kwargs_json)s, %(priority)s, %(max_attempts)s,
        %(lease_seconds)s, COALESCE(%(run_at)s, leased_now() + %(delay_seconds)s), leased_now(),
        %(idempotency_key)s, %(timeout_seconds)s, %(concurrency_key)s, %(key_concurrency)s, %(key_rate_count)s,
        %(key_rate_seconds)s, %(status)s, %(workflow_id)s, %(isolation)s, %(max_crashes)s, %(trace_context)s)
RETURNING id, run_after, created_at, idempotency_key;

-- name: pending_with_key
SELECT * FROM leased_jobs WHERE waiting_key = %(idempotency_key)s;

-- name: claim_ids
-- Jobs without a key in queues without a limit, read through the due index in claim order; rows
-- another claim has locked are skipped, never waited for. The task and queue lists are tested row
-- by row (JSON_CONTAINS): joined as JSON_TABLE semi-joins they made MariaDB read the whole due
-- range into a temporary table and sort it (45 ms a claim with 20,000 due jobs; 0.4 ms now).
SELECT id, priority, run_after, queue_name FROM leased_jobs FORCE INDEX (leased_jobs_due)
WHERE due_rank IS NOT NULL AND run_after <= leased_now()
  AND JSON_CONTAINS(%(task_names)s, JSON_QUOTE(task_name))
  AND (%(queue_names)s IS NULL
       OR JSON_CONTAINS(%(queue_names)s, JSON_QUOTE(queue_name)))
  AND queue_name NOT IN (SELECT queue_name FROM leased_queue_limits)
  AND queue_name NOT IN (SELECT queue_name FROM leased_queues WHERE paused_at IS NOT NULL)
ORDER BY due_rank, run_after, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: take_leases
-- The jobs whose ids a claim read (and locked), leased to the worker; refuse_rows then ends those
-- whose row no enqueue of leased writes (after: the claim's locks are taken in the order they were).
-- Joined to the ids, not `id IN (SELECT ...)`: MariaDB plans a single-table UPDATE or DELETE with
-- a subquery as a scan (here of every pending job); the multi-table form looks each id up.
UPDATE leased_jobs AS job FORCE INDEX (PRIMARY) JOIN JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids ON job.id = ids.value
SET status = 'running', attempt = attempt + 1, lease_owner = %(worker_id)s,
    lease_expires_at = leased_now() + lease_seconds, attempt_started_at = leased_now()
WHERE status = 'pending' AND attempt < 2147483647 AND lease_seconds > 0 AND lease_seconds <= 86400;

-- name: refuse_rows
-- Of the jobs a claim read (and locked), those take_leases left pending: rows no enqueue of leased
-- writes (another program's, a DBA's), whose attempt cannot grow or whose lease cannot be computed,
-- which failed the whole claim, every claim, so nothing ran. Each is failed, naming the column.
UPDATE leased_jobs AS job FORCE INDEX (PRIMARY) JOIN JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids ON job.id = ids.value
SET status = 'failed', finished_at = leased_now(),
    last_error = CONCAT('RowRefused: ', IF(attempt >= 2147483647, CONCAT('attempt ', attempt),
                                           CONCAT('lease_seconds ', lease_seconds)),
                        ' is out of range; the row was not written by leased''s enqueue')
WHERE status = 'pending' AND NOT (attempt < 2147483647 AND lease_seconds > 0 AND lease_seconds <= 86400);

-- name: leased_jobs
SELECT * FROM leased_jobs
WHERE id IN (SELECT value FROM JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids)
  AND lease_owner = %(worker_id)s AND status = 'running';

-- name: renew
-- Joined to the leases, each row found by its primary key: as `(id, attempt) IN (SELECT ...)`
-- MariaDB planned it as a range scan of every running job in the status index, and locked each
-- (802 row locks for 12 leases with 400 running), so renewals deadlocked with other workers'
-- finishes (see take_leases).
UPDATE leased_jobs AS job FORCE INDEX (PRIMARY)
JOIN JSON_TABLE(%(leases)s, '$[*]' COLUMNS (job_id BIGINT PATH '$[0]', attempt INT PATH '$[1]')) AS l
  ON job.id = l.job_id AND job.attempt = l.attempt
SET job.lease_expires_at = leased_now() + job.lease_seconds
WHERE job.status = 'running' AND job.lease_owner = %(worker_id)s AND job.lease_expires_at > leased_now();

-- name: record_progress
-- With a renewal, in its transaction: how far each attempt got (TaskContext.progress), as its
-- handler last said since the renewal before. :progress is a JSON array of [job_id, attempt,
-- progress]; each row found by its primary key, as renew finds it.
UPDATE leased_jobs AS job FORCE INDEX (PRIMARY)
JOIN JSON_TABLE(%(progress)s, '$[*]' COLUMNS (
    job_id BIGINT PATH '$[0]', attempt INT PATH '$[1]', progress LONGTEXT PATH '$[2]')) AS reported
  ON job.id = reported.job_id AND job.attempt = reported.attempt
SET job.progress = reported.progress
WHERE job.status = 'running' AND job.lease_owner = %(worker_id)s;

-- name: held_leases
-- Of the given leases, those the worker holds unexpired: after renew, the ones it renewed.
SELECT id, attempt FROM leased_jobs
WHERE status = 'running' AND lease_owner = %(worker_id)s AND lease_expires_at > leased_now()
  AND (id, attempt) IN (SELECT job_id, attempt FROM JSON_TABLE(%(leases)s, '$[*]' COLUMNS (
          job_id BIGINT PATH '$[0]', attempt INT PATH '$[1]')) AS l)
FOR UPDATE;

-- name: lease_fence
-- A transactional handler's end (store.finish_in), in the handler's own transaction: the lease
-- still held and not expired by the database's clock (NOW(6) is the statement's), the row locked
-- until the handler's writes commit with the end. By primary key alone: leases_to_finish's range
-- would lock other handlers' rows, which their own open transactions hold (a deadlock each time).
SELECT id, attempt, queue_name, task_name, workflow_id FROM leased_jobs
WHERE id = %(job_id)s AND attempt = %(attempt)s AND lease_owner = %(worker_id)s AND status = 'running'
  AND lease_expires_at > leased_now()
FOR UPDATE;

-- name: leases_to_finish
-- Of the given leases, those the worker still holds, expired or not (a lease is lost once another
-- claim or a reclaim takes the job, or a user cancels it), locked: the ends that finish may write.
SELECT id, attempt, queue_name, task_name, workflow_id FROM leased_jobs
WHERE status = 'running' AND lease_owner = %(worker_id)s
  AND (id, attempt) IN (SELECT job_id, attempt FROM JSON_TABLE(%(leases)s, '$[*]' COLUMNS (
          job_id BIGINT PATH '$[0]', attempt INT PATH '$[1]')) AS l)
FOR UPDATE;

-- name: finish
-- :ends is a JSON array of [job_id, attempt, worker_id, status, result, last_error, retry_in_seconds,
-- progress, outcome]; each end is fenced on its lease (leases_to_finish locked those still held, first).
-- An attempt whose process died (outcome crashed) adds to the job's crashes (migration 0023).
UPDATE leased_jobs AS job
JOIN JSON_TABLE(%(ends)s, '$[*]' COLUMNS (
    job_id BIGINT PATH '$[0]', attempt INT PATH '$[1]', worker_id VARCHAR(255) PATH '$[2]',
    status VARCHAR(16) PATH '$[3]', result LONGTEXT PATH '$[4]', last_error LONGTEXT PATH '$[5]',
    retry_in_seconds DOUBLE PATH '$[6]', progress LONGTEXT PATH '$[7]', outcome VARCHAR(16) PATH '$[8]')) AS ends
  ON job.id = ends.job_id AND job.attempt = ends.attempt AND job.lease_owner = ends.worker_id
SET job.result = ends.result,
    job.last_error = COALESCE(ends.last_error, job.last_error),
    job.finished_at = CASE WHEN ends.status = 'pending' THEN NULL ELSE leased_now() END,
    job.run_after = CASE WHEN ends.status = 'pending' THEN leased_now() + ends.retry_in_seconds
                         ELSE job.run_after END,
    job.lease_owner = NULL,
    job.lease_expires_at = NULL,
    job.progress = COALESCE(ends.progress, job.progress),
    job.crashes = job.crashes + (ends.outcome <=> 'crashed'),
    job.status = ends.status
WHERE job.status = 'running';

-- name: count_finished
-- Jobs that finished (done or failed), counted by minute in their worker's own rows (migration
-- 0011), in the transaction that finished them (finish, or the reclaim that fails a job whose last
-- lease expired). :counts is a JSON array of [queue_name, task_name, worker_id, done, failed].
INSERT INTO leased_throughput (minute, queue_name, task_name, worker_id, done, failed)
SELECT FLOOR(leased_now() / 60) * 60, counts.queue_name, counts.task_name, counts.worker_id, counts.done,
       counts.failed
FROM JSON_TABLE(%(counts)s, '$[*]' COLUMNS (
    queue_name VARCHAR(255) PATH '$[0]', task_name VARCHAR(255) PATH '$[1]', worker_id VARCHAR(255) PATH '$[2]',
    done BIGINT PATH '$[3]', failed BIGINT PATH '$[4]')) AS counts
ON DUPLICATE KEY UPDATE done = leased_throughput.done + VALUES(done), failed = leased_throughput.failed + VALUES(failed);

-- name: record_attempts
-- An attempt's record, written once as it ends, from what the claim wrote in the job row (its
-- worker and start); run before the job row's own end (finish, release, cancel, the reclaim of an
-- expired lease), in the same transaction.
-- :ends is a JSON array of [job_id, attempt, worker_id, outcome, error_type, error_message, traceback,
-- progress, handler_outlived_limit (0 or 1; absent: not known), trace_context (the attempt's span;
-- absent: untraced)]; each is fenced on its lease as
-- finish is, so a worker that lost it writes no outcome.
-- A record that an older version opened at claim is closed in place (outcome is set last: the
-- assignments run in order, and the others test the old one). Untold progress (a release, an
-- expiry) is the attempt's latest report, as its last renewal wrote it, its attempt matched in the
-- text Progress.to_json writes (comparing JSON_VALUE's text to a number fails a strict-mode insert).
INSERT INTO leased_attempts (job_id, attempt, worker_id, started_at, finished_at, outcome, error_type,
                             error_message, traceback, progress, handler_outlived_limit, trace_context)
SELECT job.id, job.attempt, job.lease_owner, COALESCE(job.attempt_started_at, leased_now()), leased_now(),
       ends.outcome, ends.error_type, ends.error_message, ends.traceback,
       COALESCE(ends.progress, IF(job.progress LIKE CONCAT('%%"attempt": ', job.attempt, '}'), job.progress, NULL)),
       ends.handler_outlived_limit, ends.trace_context
FROM JSON_TABLE(%(ends)s, '$[*]' COLUMNS (
    job_id BIGINT PATH '$[0]', attempt INT PATH '$[1]', worker_id VARCHAR(255) PATH '$[2]',
    outcome VARCHAR(16) PATH '$[3]', error_type VARCHAR(255) PATH '$[4]', error_message LONGTEXT PATH '$[5]',
    traceback LONGTEXT PATH '$[6]', progress LONGTEXT PATH '$[7]', handler_outlived_limit INT PATH '$[8]',
    trace_context TEXT PATH '$[9]')) AS ends
JOIN leased_jobs AS job FORCE INDEX (PRIMARY)
  ON job.id = ends.job_id AND job.attempt = ends.attempt AND job.lease_owner = ends.worker_id
WHERE job.status = 'running'
ON DUPLICATE KEY UPDATE
    leased_attempts.finished_at = IF(leased_attempts.outcome IS NULL, VALUES(finished_at), leased_attempts.finished_at),
    leased_attempts.error_type = IF(leased_attempts.outcome IS NULL, VALUES(error_type), leased_attempts.error_type),
    leased_attempts.error_message = IF(leased_attempts.outcome IS NULL, VALUES(error_message), leased_attempts.error_message),
    leased_attempts.traceback = IF(leased_attempts.outcome IS NULL, VALUES(traceback), leased_attempts.traceback),
    leased_attempts.progress = IF(leased_attempts.outcome IS NULL, VALUES(progress), leased_attempts.progress),
    leased_attempts.handler_outlived_limit = IF(leased_attempts.outcome IS NULL, VALUES(handler_outlived_limit),
                                                leased_attempts.handler_outlived_limit),
    leased_attempts.trace_context = IF(leased_attempts.outcome IS NULL, VALUES(trace_context),
                                       leased_attempts.trace_context),
    leased_attempts.outcome = IF(leased_attempts.outcome IS NULL, VALUES(outcome), leased_attempts.outcome);

-- name: release
-- Joined by primary key, as renew is: no other worker's running rows are scanned or locked.
UPDATE leased_jobs AS job FORCE INDEX (PRIMARY)
JOIN JSON_TABLE(%(leases)s, '$[*]' COLUMNS (job_id BIGINT PATH '$[0]', attempt INT PATH '$[1]')) AS l
  ON job.id = l.job_id AND job.attempt = l.attempt
SET job.status = 'pending', job.run_after = leased_now(), job.lease_owner = NULL, job.lease_expires_at = NULL
WHERE job.status = 'running' AND job.lease_owner = %(worker_id)s;

-- name: expired_ids
-- Expired leases through the leases index (NULL for every job not running); rows a claim or
-- another reclaimer has locked are left to it. What record_attempts needs comes along: it writes
-- the records before reclaim_expired clears the leases they are read from.
-- gone: the lease's worker has a row, silent for :silent_after seconds or more (or marked so when
-- its supervisor saw it die: bury_worker); sql/store.py, _reclaim, reads it as a crash. A worker
-- without a row (one that never registered: a test's, a script's) is not known to be dead.
SELECT id, attempt, lease_owner, queue_name, task_name, workflow_id, max_attempts, crashes, max_crashes,
       EXISTS (SELECT 1 FROM leased_workers AS w
               WHERE w.id = job.lease_owner AND w.last_seen_at <= leased_now() - %(silent_after)s) AS gone
FROM leased_jobs AS job FORCE INDEX (leased_jobs_leases)
WHERE running_expires_at <= leased_now()
FOR UPDATE SKIP LOCKED;

-- name: reclaim_expired
-- The job's last error is its expired attempt's, just recorded. Joined by primary key, as renew
-- is: `id IN (SELECT ...)` scanned the running set and locked rows that workers were finishing.
-- The assignments run in order: status and finished_at read the attempt before it is cleared.
-- An attempt recorded as crashed adds to the job's crashes (set last, after the others read the
-- count before it), and the crash that reaches max_crashes fails it as a poison job.
UPDATE leased_jobs AS job FORCE INDEX (PRIMARY)
JOIN JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids ON job.id = ids.value
JOIN leased_attempts AS a ON a.job_id = job.id AND a.attempt = job.attempt
SET job.status = CASE WHEN job.attempt >= job.max_attempts
                           OR (a.outcome <=> 'crashed' AND job.crashes + 1 >= job.max_crashes) THEN 'failed'
                      ELSE 'pending' END,
    job.finished_at = CASE WHEN job.attempt >= job.max_attempts
                                OR (a.outcome <=> 'crashed' AND job.crashes + 1 >= job.max_crashes) THEN leased_now() END,
    job.last_error = IF(a.outcome <=> 'crashed' AND job.crashes + 1 >= job.max_crashes,
                        CONCAT('quarantined after ', job.crashes + 1, IF(job.crashes = 0, ' crash: ', ' crashes: '),
                               a.error_message), a.error_message),
    job.lease_owner = NULL,
    job.lease_expires_at = NULL,
    job.crashes = job.crashes + (a.outcome <=> 'crashed')
WHERE job.status = 'running';

-- name: get_job
SELECT * FROM leased_jobs WHERE id = %(job_id)s;

-- name: get_history
SELECT * FROM leased_attempts WHERE job_id = %(job_id)s ORDER BY attempt;

-- name: list_jobs_newest
-- Two filters that each have an index ending in the id (status and queue, say) tempt MariaDB to
-- intersect both indexes and sort every match (1.5 s for a page at a million jobs); without the
-- intersection it walks one of them in id order and stops at the page's end.
SET STATEMENT optimizer_switch = 'index_merge_intersection=off' FOR
SELECT * FROM leased_jobs
WHERE (%(status)s IS NULL OR status = %(status)s)
  AND (%(queue_name)s IS NULL OR queue_name = %(queue_name)s)
  AND (%(task_name)s IS NULL OR task_name = %(task_name)s)
  AND (%(search)s IS NULL OR id = %(search_id)s OR idempotency_key = %(search)s)
  AND (%(before_id)s IS NULL OR id < %(before_id)s)
  AND (%(worker_id)s IS NULL OR lease_owner = %(worker_id)s
       OR id IN (SELECT job_id FROM leased_attempts WHERE worker_id = %(worker_id)s))
ORDER BY id DESC
LIMIT %(limit)s;

-- name: list_jobs_oldest
-- As list_jobs_newest, in the other direction.
SET STATEMENT optimizer_switch = 'index_merge_intersection=off' FOR
SELECT * FROM leased_jobs
WHERE (%(status)s IS NULL OR status = %(status)s)
  AND (%(queue_name)s IS NULL OR queue_name = %(queue_name)s)
  AND (%(task_name)s IS NULL OR task_name = %(task_name)s)
  AND (%(search)s IS NULL OR id = %(search_id)s OR idempotency_key = %(search)s)
  AND (%(after_id)s IS NULL OR id > %(after_id)s)
  AND (%(worker_id)s IS NULL OR lease_owner = %(worker_id)s
       OR id IN (SELECT job_id FROM leased_attempts WHERE worker_id = %(worker_id)s))
ORDER BY id
LIMIT %(limit)s;

-- name: counts
-- Every row, exactly: `Leased.counts()`, for scripts and tests. The dashboard reads the cheap ones below.
SELECT queue_name, status, count(*) AS n FROM leased_jobs GROUP BY queue_name, status;

-- Cheap counts (leased/counts.py), read in one snapshot. None of them reads the finished history.
-- name: count_id_range
SELECT min(id) AS low, max(id) AS high FROM leased_jobs;

-- name: count_active
-- Exact, each part through the index of a generated column that is NULL outside its set (the
-- claim's and the reclaim's), so the ranges hold only pending or running jobs.
SELECT queue_name, 'pending' AS status, count(*) AS n FROM leased_jobs FORCE INDEX (leased_jobs_due)
WHERE due_rank IS NOT NULL GROUP BY queue_name
UNION ALL
SELECT queue_name, 'pending', count(*) FROM leased_jobs FORCE INDEX (leased_jobs_keyed_due)
WHERE due_key IS NOT NULL GROUP BY queue_name
UNION ALL
SELECT queue_name, 'running', count(*) FROM leased_jobs FORCE INDEX (leased_jobs_leases)
WHERE running_expires_at IS NOT NULL GROUP BY queue_name
UNION ALL
SELECT waiting_queue, 'waiting', count(*) FROM leased_jobs FORCE INDEX (leased_jobs_waiting)
WHERE waiting_queue IS NOT NULL GROUP BY waiting_queue
UNION ALL
SELECT queue_name, 'sleeping', count(*) FROM leased_jobs FORCE INDEX (leased_jobs_status_queue)
WHERE status = 'sleeping' GROUP BY queue_name;

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
WHERE status = 'failed' AND %(failed)s = 1 GROUP BY queue_name
UNION ALL
SELECT queue_name, 'cancelled', count(*) FROM leased_jobs
WHERE status = 'cancelled' AND %(cancelled)s = 1 GROUP BY queue_name;

-- name: count_sample
-- The jobs at the probed ids, by primary key; an id with no job (pruned, deleted) is a miss.
SELECT j.queue_name, j.status, count(*) AS n
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (id BIGINT PATH '$')) AS probe
JOIN leased_jobs AS j ON j.id = probe.id
GROUP BY j.queue_name, j.status;

-- name: lock_for_retry
SELECT id, queue_name, workflow_id FROM leased_jobs WHERE id = %(job_id)s AND status IN ('failed', 'cancelled')
FOR UPDATE;

-- name: retry
UPDATE leased_jobs
SET status = 'pending', run_after = leased_now(), finished_at = NULL,
    max_attempts = GREATEST(max_attempts, attempt + 1), crashes = LEAST(crashes, max_crashes - 1)
WHERE id = %(job_id)s AND status IN ('failed', 'cancelled');

-- name: lock_for_cancel
-- A running job's attempt and worker come along: its record is written before cancel clears them.
SELECT id, attempt, lease_owner, status, workflow_id FROM leased_jobs
WHERE id = %(job_id)s AND status IN ('pending', 'running', 'waiting', 'sleeping') FOR UPDATE;

-- name: cancel
UPDATE leased_jobs
SET status = 'cancelled', finished_at = leased_now(), lease_owner = NULL, lease_expires_at = NULL
WHERE id = %(job_id)s AND status IN ('pending', 'running', 'waiting', 'sleeping');

-- name: oldest_due
SELECT queue_name, leased_now() - min(run_after) AS seconds FROM leased_jobs
WHERE status = 'pending' AND run_after <= leased_now()
GROUP BY queue_name;

-- name: finished_since
-- Done and failed per queue since the start of the minute `window_seconds` ago, from the counts
-- kept as jobs finish (migration 0011): the same minutes throughput draws.
SELECT queue_name, CAST(sum(done) AS SIGNED) AS done, CAST(sum(failed) AS SIGNED) AS failed FROM leased_throughput
WHERE minute >= FLOOR((leased_now() - %(window_seconds)s) / 60) * 60
GROUP BY queue_name;

-- name: failed_to_retry
SELECT id, queue_name, workflow_id FROM leased_jobs
WHERE status = 'failed'
  AND (%(task_name)s IS NULL OR task_name = %(task_name)s)
  AND (%(queue_name)s IS NULL OR queue_name = %(queue_name)s)
FOR UPDATE;

-- name: retry_jobs
UPDATE leased_jobs AS job FORCE INDEX (PRIMARY) JOIN JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids ON job.id = ids.value
SET status = 'pending', run_after = leased_now(), finished_at = NULL,
    max_attempts = GREATEST(max_attempts, attempt + 1), crashes = LEAST(crashes, max_crashes - 1)
WHERE status = 'failed';

-- name: task_names
-- DISTINCT on the leading column of an index: a loose index scan, not a read of every row.
SELECT DISTINCT task_name AS name FROM leased_jobs ORDER BY task_name;

-- name: queue_names
SELECT DISTINCT queue_name AS name FROM leased_jobs ORDER BY queue_name;

-- name: register_worker
INSERT INTO leased_workers (id, host, pid, concurrency, queues, tasks, wake_port, wake_host, stuck_handlers,
                            children, task_signatures, started_at, last_seen_at)
VALUES (%(id)s, %(host)s, %(pid)s, %(concurrency)s, %(queues)s, %(tasks)s, %(wake_port)s, %(host)s,
        %(stuck_handlers)s, %(children)s, %(task_signatures)s, leased_now(), leased_now())
ON DUPLICATE KEY UPDATE last_seen_at = leased_now(), stuck_handlers = VALUE(stuck_handlers),
                        children = VALUE(children);

-- name: wake_ports
-- Datagrams reach workers on this host only; the others poll.
SELECT wake_port FROM leased_workers
WHERE wake_port IS NOT NULL AND wake_host = %(host)s
  AND last_seen_at > leased_now() - %(silent_after)s;

-- name: bury_workers
-- Workers their supervisor saw die (bury_workers): silent from now on, as if for :silent_after
-- seconds, so that the reclaim reads their leases' ends as crashes; shown as gone.
UPDATE leased_workers SET last_seen_at = leased_now() - %(silent_after)s - 1
WHERE LEFT(id, CHAR_LENGTH(%(prefix)s)) = %(prefix)s;

-- name: expire_leases_of
-- Their leases end now: the reclaim in the same transaction takes them.
UPDATE leased_jobs FORCE INDEX (leased_jobs_leases) SET lease_expires_at = leased_now()
WHERE running_expires_at IS NOT NULL AND LEFT(lease_owner, CHAR_LENGTH(%(prefix)s)) = %(prefix)s;

-- name: prune_workers
DELETE FROM leased_workers WHERE last_seen_at < leased_now() - 86400;

-- name: unregister_worker
DELETE FROM leased_workers WHERE id = %(id)s;

-- name: list_workers
SELECT w.*, leased_now() - w.last_seen_at AS silent_seconds,
       (SELECT count(*) FROM leased_jobs AS j WHERE j.status = 'running' AND j.lease_owner = w.id) AS running
FROM leased_workers AS w
ORDER BY w.started_at;

-- name: migration_lock
-- DDL commits on its own in MariaDB, so migrators take turns under a named lock instead of a
-- transaction; each version is recorded as soon as it is applied.
SELECT GET_LOCK(CONCAT('leased_migrate:', DATABASE()), 60) AS locked;

-- name: migration_unlock
SELECT RELEASE_LOCK(CONCAT('leased_migrate:', DATABASE())) AS released;

-- name: applied_versions
SELECT version FROM leased_schema_version;

-- name: schema_compatibility
-- Which older code runs on the versions applied (migration 0022): read when the schema is newer
-- than this code.
SELECT version, oldest_code_version FROM leased_schema_compatibility;

-- name: create_version_table
CREATE TABLE IF NOT EXISTS leased_schema_version (
    version INT NOT NULL PRIMARY KEY,
    applied_at DOUBLE NOT NULL
) ENGINE = InnoDB;

-- Explaining one job (`leased why`): read in one consistent snapshot.

-- name: why_snapshot
START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY;

-- name: why_now
SELECT CAST(leased_now() AS DOUBLE) AS now;

-- name: jobs_ahead
SELECT count(*) AS n FROM (
    SELECT 1 FROM leased_jobs AS job, leased_jobs AS other
    WHERE job.id = %(job_id)s
      AND other.status = 'pending' AND other.queue_name = job.queue_name
      AND other.run_after <= leased_now()
      AND other.priority >= job.priority
      AND (other.priority > job.priority OR other.run_after < job.run_after
           OR (other.run_after = job.run_after AND other.id < job.id))
    LIMIT %(limit)s
) AS ahead;

-- name: pending_to_cancel
SELECT id, attempt, workflow_id FROM leased_jobs
WHERE status = 'pending'
  AND (%(task_name)s IS NULL OR task_name = %(task_name)s)
  AND (%(queue_name)s IS NULL OR queue_name = %(queue_name)s)
FOR UPDATE;

-- name: cancel_jobs
UPDATE leased_jobs AS job FORCE INDEX (PRIMARY) JOIN JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids ON job.id = ids.value
SET status = 'cancelled', finished_at = leased_now()
WHERE status = 'pending';

-- name: count_jobs
SELECT count(*) AS n FROM leased_jobs
WHERE (%(status)s IS NULL OR status = %(status)s)
  AND (%(task_name)s IS NULL OR task_name = %(task_name)s)
  AND (%(queue_name)s IS NULL OR queue_name = %(queue_name)s);

-- name: explain_expired_jobs
UPDATE leased_jobs
SET last_error = CONCAT('lease expired: ', %(message)s)
WHERE status <> 'running' AND (id, attempt) IN (
    SELECT job_id, attempt FROM leased_attempts
    WHERE worker_id = %(worker_id)s AND outcome = 'expired'
      AND (job_id, attempt) IN (SELECT job_id, attempt FROM JSON_TABLE(%(leases)s, '$[*]' COLUMNS (
              job_id BIGINT PATH '$[0]', attempt INT PATH '$[1]')) AS l));

-- name: explain_expired_attempts
UPDATE leased_attempts
SET error_message = %(message)s
WHERE worker_id = %(worker_id)s AND outcome = 'expired'
  AND (job_id, attempt) IN (SELECT job_id, attempt FROM JSON_TABLE(%(leases)s, '$[*]' COLUMNS (
          job_id BIGINT PATH '$[0]', attempt INT PATH '$[1]')) AS l);

-- Periodic jobs (backends/sql/schedules.py).

-- name: database_now
SELECT CAST(leased_now() AS DOUBLE) AS now;

-- name: list_schedules
SELECT s.*, j.status AS last_job_status,
       (SELECT d.finished_at FROM leased_jobs AS d FORCE INDEX (leased_jobs_task)
        WHERE d.task_name = s.name AND d.status = 'done' ORDER BY d.id DESC LIMIT 1) AS last_success_at
FROM leased_schedules AS s LEFT JOIN leased_jobs AS j ON j.id = s.last_job_id
ORDER BY s.name;

-- name: ensure_schedule
-- Not INSERT IGNORE: on a row that exists it takes a shared lock, and two workers that both hold one
-- deadlock on lock_schedule's FOR UPDATE. Updating nothing takes the exclusive lock at once: they queue.
INSERT INTO leased_schedules (name, expression, timezone, updated_at)
VALUES (%(name)s, %(expression)s, %(timezone)s, leased_now())
ON DUPLICATE KEY UPDATE name = name;

-- name: lock_schedule
SELECT * FROM leased_schedules WHERE name = %(name)s FOR UPDATE;

-- name: claim_tick
-- No row back when another worker wrote this tick: the backend catches the primary key's refusal
-- (NO_ROW_WHEN_TAKEN), as it does a run's key; IGNORE would swallow data errors too.
INSERT INTO leased_schedule_ticks (schedule_name, tick_at) VALUES (%(schedule_name)s, %(tick_at)s)
RETURNING tick_at;

-- name: job_active
SELECT 1 AS active FROM leased_jobs WHERE id = %(job_id)s AND status IN ('pending', 'running', 'sleeping');

-- name: set_tick_job
UPDATE leased_schedule_ticks SET job_id = %(job_id)s WHERE schedule_name = %(schedule_name)s AND tick_at = %(tick_at)s;

-- name: update_schedule
UPDATE leased_schedules
SET expression = %(expression)s, timezone = %(timezone)s,
    last_tick_at = GREATEST(COALESCE(last_tick_at, %(last_tick_at)s), %(last_tick_at)s),
    last_job_id = %(last_job_id)s, skipped_ticks = skipped_ticks + %(skipped)s,
    last_skipped_at = COALESCE(%(last_skipped_at)s, last_skipped_at), updated_at = leased_now()
WHERE name = %(name)s;

-- name: prune_ticks
DELETE FROM leased_schedule_ticks
WHERE schedule_name = %(schedule_name)s
  AND tick_at NOT IN (SELECT tick_at FROM (SELECT tick_at FROM leased_schedule_ticks
                                           WHERE schedule_name = %(schedule_name)s
                                           ORDER BY tick_at DESC LIMIT %(keep)s) AS kept);

-- Limits (0005). Claims of limited jobs take turns under a named lock (limited_claim_lock), as
-- PostgreSQL's take an advisory lock: no two can both see the same free room.

-- name: limits_in_use
SELECT EXISTS (SELECT 1 FROM leased_jobs FORCE INDEX (leased_jobs_keyed_due) WHERE due_key IS NOT NULL)
    OR EXISTS (SELECT 1 FROM leased_queue_limits) AS in_use;

-- name: limited_claim_lock
SELECT GET_LOCK(CONCAT('leased_limited_claim:', DATABASE()), 30) AS locked;

-- name: limited_claim_unlock
SELECT RELEASE_LOCK(CONCAT('leased_limited_claim:', DATABASE())) AS released;

-- The limited claim's reads (backends/mariadb/limited.py picks from them, in claim order, within
-- the limits; the caller leases the picked ids). MariaDB has no LATERAL and no LIMIT inside IN
-- subqueries, and does not seek a range whose bound comes from another row (a correlated subquery
-- or a recursive CTE scans the index from its start), so the per-key and per-queue reads that
-- PostgreSQL bounds in one statement are statements of their own here, each with literal bounds:
-- the waiting keys are visited one probe each, and only a key's room of its jobs is read. A key
-- with no room costs one probe however many jobs wait behind it.

-- name: limited_queue_rooms
-- A limited queue's room: its cap minus its running jobs (and its starts within the rate window).
-- Room may be negative after a limit was lowered: nothing is claimed.
SELECT l.queue_name, LEAST(
    COALESCE(l.concurrency - (SELECT count(*) FROM leased_jobs AS r
                              WHERE r.queue_name = l.queue_name AND r.status = 'running'), %(limit)s),
    COALESCE(l.rate_count - (SELECT count(*) FROM leased_starts AS s
                             WHERE s.limit_name = CONCAT('queue:', l.queue_name)
                               AND s.started_at > leased_now() - l.rate_seconds), %(limit)s),
    %(limit)s) AS room
FROM leased_queue_limits AS l;

-- name: limited_queue_due_jobs
-- Up to :room due jobs without a key of one limited queue, in claim order (leased_jobs_queue_due
-- holds them in that order).
SELECT id, priority, run_after, queue_name FROM leased_jobs FORCE INDEX (leased_jobs_queue_due)
WHERE queue_name = %(queue_name)s AND due_rank IS NOT NULL AND run_after <= leased_now()
  AND JSON_CONTAINS(%(task_names)s, JSON_QUOTE(task_name))
  AND (%(queue_names)s IS NULL OR JSON_CONTAINS(%(queue_names)s, JSON_QUOTE(queue_name)))
  AND queue_name NOT IN (SELECT queue_name FROM leased_queues WHERE paused_at IS NOT NULL)
ORDER BY due_rank, run_after, id
LIMIT %(room)s;

-- name: next_waiting_key
-- The first waiting key after :after (NULL: the first of all), and its room: its cap minus its
-- running jobs (and its starts within the rate window), read from the key's head job (its next in
-- claim order), which carries the key's limits. Three probes of leased_jobs_keyed_due: the key,
-- its top priority (read backwards: ORDER BY priority DESC, run_after, id has no index order here),
-- and the head within that priority.
WITH next_key AS (
    SELECT due_key FROM leased_jobs FORCE INDEX (leased_jobs_keyed_due)
    WHERE due_key IS NOT NULL AND (%(after)s IS NULL OR due_key > %(after)s)
    ORDER BY due_key LIMIT 1
)
SELECT head.due_key AS limit_key, LEAST(
    COALESCE(head.key_concurrency - (SELECT count(*) FROM leased_jobs FORCE INDEX (leased_jobs_keyed_running)
                                     WHERE running_key = head.due_key), %(limit)s),
    COALESCE(head.key_rate_count - (SELECT count(*) FROM leased_starts
                                    WHERE limit_name = CONCAT('key:', head.due_key)
                                      AND started_at > leased_now() - head.key_rate_seconds), %(limit)s),
    %(limit)s) AS room
FROM (SELECT due_key, key_concurrency, key_rate_count, key_rate_seconds
      FROM leased_jobs FORCE INDEX (leased_jobs_keyed_due)
      WHERE due_key = (SELECT due_key FROM next_key)
        AND priority = (SELECT priority FROM leased_jobs FORCE INDEX (leased_jobs_keyed_due)
                        WHERE due_key = (SELECT due_key FROM next_key) ORDER BY priority DESC LIMIT 1)
      ORDER BY run_after, id LIMIT 1) AS head;

-- name: waiting_key_level
-- A key's next priority below :below (NULL: its highest) as `level`, and up to :room of its due
-- jobs at that priority, in claim order; a level with none of them due (or for these workers) is
-- one row whose id is NULL. No row: the key has no lower priority.
WITH level AS (
    SELECT priority FROM leased_jobs FORCE INDEX (leased_jobs_keyed_due)
    WHERE due_key = %(limit_key)s AND (%(below)s IS NULL OR priority < %(below)s)
    ORDER BY priority DESC LIMIT 1
)
SELECT level.priority AS level, job.id, job.priority, job.run_after, job.queue_name
FROM level LEFT JOIN (
    SELECT id, priority, run_after, queue_name FROM leased_jobs FORCE INDEX (leased_jobs_keyed_due)
    WHERE due_key = %(limit_key)s AND priority = (SELECT priority FROM level) AND run_after <= leased_now()
      AND JSON_CONTAINS(%(task_names)s, JSON_QUOTE(task_name))
      AND (%(queue_names)s IS NULL OR JSON_CONTAINS(%(queue_names)s, JSON_QUOTE(queue_name)))
      AND queue_name NOT IN (SELECT queue_name FROM leased_queues WHERE paused_at IS NOT NULL)
    ORDER BY run_after, id
    LIMIT %(room)s
) AS job ON TRUE;

-- name: record_starts
INSERT INTO leased_starts (limit_name, started_at)
SELECT CONCAT('key:', concurrency_key), leased_now() FROM leased_jobs
WHERE id IN (SELECT value FROM JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids)
  AND key_rate_count IS NOT NULL
UNION ALL
SELECT CONCAT('queue:', job.queue_name), leased_now() FROM leased_jobs AS job
JOIN leased_queue_limits AS l ON l.queue_name = job.queue_name AND l.rate_count IS NOT NULL
WHERE job.id IN (SELECT value FROM JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids);

-- name: forget_old_starts
DELETE FROM leased_starts WHERE started_at < leased_now() - 3600;

-- name: set_queue_limit
INSERT INTO leased_queue_limits (queue_name, concurrency, rate_count, rate_seconds)
VALUES (%(queue_name)s, %(concurrency)s, %(rate_count)s, %(rate_seconds)s)
ON DUPLICATE KEY UPDATE concurrency = VALUE(concurrency), rate_count = VALUE(rate_count),
                        rate_seconds = VALUE(rate_seconds);

-- name: clear_queue_limit
DELETE FROM leased_queue_limits WHERE queue_name = %(queue_name)s;

-- name: queue_limits
SELECT * FROM leased_queue_limits ORDER BY queue_name;

-- Pausing queues, and pruning finished jobs (migration 0003).

-- name: ensure_queue
-- Not INSERT IGNORE, which turns strict-mode data errors into warnings: a row there already is left as it is.
INSERT INTO leased_queues (queue_name, paused_at) VALUES (%(queue_name)s, NULL)
ON DUPLICATE KEY UPDATE queue_name = leased_queues.queue_name;

-- name: pause_queue
-- Changes a row only if this paused the queue (it was not paused already).
UPDATE leased_queues SET paused_at = leased_now() WHERE queue_name = %(queue_name)s AND paused_at IS NULL;

-- name: resume_queue
UPDATE leased_queues SET paused_at = NULL WHERE queue_name = %(queue_name)s AND paused_at IS NOT NULL;

-- name: paused_queues
SELECT queue_name, leased_now() - paused_at AS seconds FROM leased_queues
WHERE paused_at IS NOT NULL ORDER BY queue_name;

-- name: prunable_ids
-- A workflow's step goes only once no step of its run can still run (workflow_id names it).
SELECT id, workflow_id FROM leased_jobs FORCE INDEX (leased_jobs_finished)
WHERE finished_at < leased_now() - %(older_than)s AND status = %(status)s
  AND (workflow_id IS NULL OR NOT EXISTS (
      SELECT 1 FROM leased_jobs AS step WHERE step.workflow_id = leased_jobs.workflow_id
        AND step.status IN ('waiting', 'pending', 'running', 'sleeping')))
  AND (%(task_names)s IS NULL
       OR task_name IN (SELECT value FROM JSON_TABLE(%(task_names)s, '$[*]' COLUMNS (value VARCHAR(255) PATH '$')) AS t))
  AND task_name NOT IN (SELECT value FROM JSON_TABLE(%(except_task_names)s, '$[*]' COLUMNS (value VARCHAR(255) PATH '$')) AS x)
ORDER BY finished_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: delete_jobs
-- Joined to the ids (see take_leases): a DELETE with `id IN (SELECT ...)` scans the table.
DELETE job FROM leased_jobs AS job FORCE INDEX (PRIMARY) JOIN JSON_TABLE(%(ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids
  ON job.id = ids.value
WHERE job.status IN ('done', 'failed', 'cancelled');

-- name: count_prunable
SELECT count(*) AS n FROM leased_jobs FORCE INDEX (leased_jobs_finished)
WHERE finished_at < leased_now() - %(older_than)s AND status = %(status)s
  AND (%(task_names)s IS NULL
       OR task_name IN (SELECT value FROM JSON_TABLE(%(task_names)s, '$[*]' COLUMNS (value VARCHAR(255) PATH '$')) AS t))
  AND task_name NOT IN (SELECT value FROM JSON_TABLE(%(except_task_names)s, '$[*]' COLUMNS (value VARCHAR(255) PATH '$')) AS x);

-- name: prune_throughput
DELETE FROM leased_throughput WHERE minute < leased_now() - %(older_than)s;

-- Folding the workers' own count rows (migration 0011) of minutes before :cutoff into one row per
-- minute, queue and task (worker_id ''): the sums the readers see are unchanged, and a month of
-- minutes keeps a row per queue and task however many workers ran. Workers count into the current
-- minute, so these rows no longer change; one written late is folded by a later pass. Both
-- statements take the same cutoff (throughput_cutoff), in one transaction, under the pruners' lock.

-- name: throughput_cutoff
SELECT leased_now() - %(older_than)s AS cutoff;

-- name: fold_throughput
INSERT INTO leased_throughput (minute, queue_name, task_name, worker_id, done, failed)
SELECT minute, queue_name, task_name, '', SUM(done), SUM(failed) FROM leased_throughput
WHERE minute < %(cutoff)s AND worker_id <> ''
GROUP BY minute, queue_name, task_name
ON DUPLICATE KEY UPDATE done = leased_throughput.done + VALUES(done), failed = leased_throughput.failed + VALUES(failed);

-- name: delete_folded
DELETE FROM leased_throughput WHERE minute < %(cutoff)s AND worker_id <> '';

-- name: try_prune_lock
SELECT GET_LOCK(CONCAT('leased_prune:', DATABASE()), 0) AS locked;

-- name: prune_unlock
SELECT RELEASE_LOCK(CONCAT('leased_prune:', DATABASE())) AS released;

-- name: throughput
-- Done and failed jobs per minute, queue and task (or, without :by_task, per minute alone) since
-- the start of the minute `window_seconds` ago, from the counts kept as jobs finish (migration
-- 0011): pruned jobs stay counted.
SELECT minute, IF(%(by_task)s, queue_name, NULL) AS queue_name, IF(%(by_task)s, task_name, NULL) AS task_name,
       CAST(sum(done) AS SIGNED) AS done, CAST(sum(failed) AS SIGNED) AS failed
FROM leased_throughput
WHERE minute >= FLOOR((leased_now() - %(window_seconds)s) / 60) * 60
GROUP BY 1, 2, 3
ORDER BY 1;

-- Explaining a job's limits, pause and schedule (`leased why`), as on the other backends.

-- name: why_queue_paused
SELECT paused_at FROM leased_queues WHERE queue_name = %(queue_name)s AND paused_at IS NOT NULL;

-- name: why_queue_limit
SELECT l.concurrency, l.rate_count, l.rate_seconds,
       (SELECT count(*) FROM leased_jobs WHERE queue_name = l.queue_name AND status = 'running') AS running,
       (SELECT count(*) FROM leased_starts
        WHERE limit_name = CONCAT('queue:', l.queue_name)
          AND started_at > leased_now() - l.rate_seconds) AS starts
FROM leased_queue_limits AS l WHERE l.queue_name = %(queue_name)s;

-- name: why_key_limit
-- The key's limits are its head job's (its next in claim order), as the claim reads them.
SELECT head.key_concurrency AS concurrency, head.key_rate_count AS rate_count, head.key_rate_seconds AS rate_seconds,
       (SELECT count(*) FROM leased_jobs
        WHERE status = 'running' AND concurrency_key = %(concurrency_key)s) AS running,
       (SELECT count(*) FROM leased_starts
        WHERE limit_name = CONCAT('key:', %(concurrency_key)s)
          AND started_at > leased_now() - head.key_rate_seconds) AS starts
FROM (SELECT key_concurrency, key_rate_count, key_rate_seconds FROM leased_jobs
      WHERE status = 'pending' AND concurrency_key = %(concurrency_key)s
      ORDER BY priority DESC, run_after, id LIMIT 1) AS head;

-- name: why_running_in_queue
SELECT id, lease_owner FROM leased_jobs WHERE status = 'running' AND queue_name = %(queue_name)s
ORDER BY id LIMIT %(limit)s;

-- name: why_running_with_key
SELECT id, lease_owner FROM leased_jobs WHERE status = 'running' AND concurrency_key = %(concurrency_key)s
ORDER BY id LIMIT %(limit)s;

-- name: why_next_slot
-- A full rate window lets one more start once its count-th newest start leaves it. (MariaDB's
-- OFFSET takes no expression, hence the row number.)
SELECT at FROM (
    SELECT started_at + %(rate_seconds)s AS at, ROW_NUMBER() OVER (ORDER BY started_at DESC) AS place
    FROM leased_starts
    WHERE limit_name = %(limit_name)s AND started_at > leased_now() - %(rate_seconds)s
) AS recent WHERE place = %(rate_count)s;

-- name: why_step
-- A workflow step's own row: when it runs, and whether its parents' ends cancelled it (not a person).
SELECT run_when, cancelled_by_parents FROM leased_steps WHERE job_id = %(job_id)s;

-- name: why_schedule_tick
-- A periodic task's name is its schedule's, so the lookup stays within one schedule's ticks.
SELECT schedule_name, tick_at FROM leased_schedule_ticks WHERE schedule_name = %(task_name)s AND job_id = %(job_id)s;

-- name: connection_identity
-- Which server and database a connection reaches, however it was addressed (a host name, an
-- address, a socket): a caller's connection= must reach ours.
SELECT @@hostname AS host, @@port AS port, @@datadir AS datadir, DATABASE() AS database_name;

-- Workflows (backends/sql/workflows.py). Lists are JSON arrays; a step's counters are in leased_steps.

-- name: free_workflow_key
-- A finished run gives up its key, so that enqueueing the same workflow again starts a new one.
UPDATE leased_workflows SET idempotency_key = NULL
WHERE idempotency_key = %(idempotency_key)s AND NOT EXISTS (
    SELECT 1 FROM leased_jobs WHERE workflow_id = leased_workflows.id AND status IN ('waiting', 'pending', 'running', 'sleeping'));

-- name: insert_workflow
-- No row back: an unfinished run holds the key (the backend catches its unique index's refusal,
-- NO_ROW_WHEN_TAKEN; INSERT IGNORE would swallow data errors too).
INSERT INTO leased_workflows (name, idempotency_key, created_at)
VALUES (%(name)s, %(idempotency_key)s, leased_now())
RETURNING id;

-- name: workflow_with_key
SELECT id FROM leased_workflows WHERE idempotency_key = %(idempotency_key)s;

-- name: step_names
SELECT job_id, name FROM leased_steps WHERE workflow_id = %(workflow_id)s;

-- name: insert_steps
-- Each step [job_id, workflow_id, name, run_when, parents_left, previous_id, added_by]. The name is
-- read as LONGTEXT: a VARCHAR(255) of JSON_TABLE's own cut a longer one with a mere warning.
INSERT INTO leased_steps (job_id, workflow_id, name, run_when, parents_left, previous_id, added_by)
SELECT job_id, workflow_id, name, run_when, parents_left, previous_id, added_by
FROM JSON_TABLE(%(steps)s, '$[*]' COLUMNS (
    job_id BIGINT PATH '$[0]', workflow_id BIGINT PATH '$[1]', name LONGTEXT PATH '$[2]',
    run_when VARCHAR(16) PATH '$[3]', parents_left INT PATH '$[4]', previous_id BIGINT PATH '$[5]',
    added_by BIGINT PATH '$[6]')) AS steps;

-- name: insert_dependencies
-- Each edge [parent_id, child_id]; an edge there already is left as it is (not INSERT IGNORE, which
-- turns strict-mode data errors into warnings).
INSERT INTO leased_dependencies (parent_id, child_id)
SELECT edges.parent_id, edges.child_id
FROM JSON_TABLE(%(edges)s, '$[*]' COLUMNS (parent_id BIGINT PATH '$[0]', child_id BIGINT PATH '$[1]')) AS edges
ON DUPLICATE KEY UPDATE parent_id = leased_dependencies.parent_id;

-- name: lock_running_step
-- The step adding steps, fenced on its lease, locked: its end waits for this transaction.
SELECT id, workflow_id FROM leased_jobs
WHERE id = %(job_id)s AND attempt = %(attempt)s AND lease_owner = %(worker_id)s AND status = 'running'
FOR UPDATE;

-- name: lock_steps_of_run
-- Steps named in a new step's after=, of this run only, locked: one ending now commits first (and
-- is seen ended) or waits, and then counts the new edges.
SELECT job.id, job.status FROM JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids
JOIN leased_jobs AS job FORCE INDEX (PRIMARY) ON job.id = ids.value
WHERE job.workflow_id = %(workflow_id)s
ORDER BY job.id
FOR UPDATE;

-- name: children_of
SELECT child_id FROM leased_dependencies WHERE parent_id = %(job_id)s;

-- name: lock_children
-- One row per edge from the given steps to a child, with the child's counters and status; the
-- children's step rows are locked, in id order, so two parents' ends count one after the other.
SELECT d.parent_id, s.job_id, s.parents_left, s.parents_failed, s.run_when, s.cancelled_by_parents, j.status
FROM JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids
JOIN leased_dependencies AS d ON d.parent_id = ids.value
JOIN leased_steps AS s ON s.job_id = d.child_id
JOIN leased_jobs AS j ON j.id = s.job_id
ORDER BY s.job_id
FOR UPDATE;

-- name: count_parents
-- Each [child_id, parents ended, of them failed]: negative to count them back (a retry).
UPDATE leased_steps AS s
JOIN JSON_TABLE(%(counts)s, '$[*]' COLUMNS (job_id BIGINT PATH '$[0]', ended INT PATH '$[1]',
                                            failed INT PATH '$[2]')) AS counts ON s.job_id = counts.job_id
SET s.parents_left = s.parents_left - counts.ended,
    s.parents_failed = GREATEST(s.parents_failed + counts.failed, 0);

-- name: names_of_steps
SELECT s.job_id, s.name FROM JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids JOIN leased_steps AS s ON s.job_id = ids.value;

-- name: previous_results
-- A chain's steps about to be released, with their arguments and the previous step's result.
SELECT s.job_id, j.args, previous.result FROM JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids
JOIN leased_steps AS s ON s.job_id = ids.value
JOIN leased_jobs AS j ON j.id = s.job_id
JOIN leased_jobs AS previous ON previous.id = s.previous_id;

-- name: set_args
UPDATE leased_jobs AS job
JOIN JSON_TABLE(%(steps)s, '$[*]' COLUMNS (job_id BIGINT PATH '$[0]', args LONGTEXT PATH '$[1]')) AS given
    ON job.id = given.job_id
SET job.args = given.args
WHERE job.status = 'waiting';

-- name: release_steps
-- MariaDB has no UPDATE ... RETURNING: the queues are read after, in this transaction.
UPDATE leased_jobs AS job FORCE INDEX (PRIMARY) JOIN JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids ON job.id = ids.value
SET job.status = 'pending', job.run_after = leased_now()
WHERE job.status = 'waiting';

-- name: released_queues
SELECT DISTINCT job.queue_name FROM JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids JOIN leased_jobs AS job ON job.id = ids.value
WHERE job.status = 'pending';

-- name: cancel_steps
-- Each [job_id, reason]: cancelled in its parents' name, which a retry of the parent undoes.
UPDATE leased_jobs AS job
JOIN JSON_TABLE(%(steps)s, '$[*]' COLUMNS (job_id BIGINT PATH '$[0]', reason TEXT PATH '$[1]')) AS given
    ON job.id = given.job_id
SET job.status = 'cancelled', job.finished_at = leased_now(), job.last_error = given.reason
WHERE job.status = 'waiting';

-- name: mark_cancelled_by_parents
UPDATE leased_steps AS s JOIN JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids ON s.job_id = ids.value SET s.cancelled_by_parents = TRUE;

-- name: uncancel_steps
UPDATE leased_steps AS s JOIN JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids ON s.job_id = ids.value SET s.cancelled_by_parents = FALSE;

-- name: rewait_steps
UPDATE leased_jobs AS job JOIN JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids ON job.id = ids.value JOIN leased_steps AS s ON s.job_id = job.id
SET job.status = 'waiting'
WHERE job.status = 'pending' AND s.parents_left > 0 AND s.parents_failed = 0;

-- name: revive_steps
UPDATE leased_jobs AS job JOIN JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids ON job.id = ids.value
SET job.status = 'waiting', job.finished_at = NULL, job.last_error = NULL
WHERE job.status = 'cancelled';

-- name: unfinished_steps
SELECT id, attempt, lease_owner, status FROM leased_jobs
WHERE workflow_id = %(workflow_id)s AND status IN ('waiting', 'pending', 'running', 'sleeping')
FOR UPDATE;

-- name: cancel_unfinished_steps
UPDATE leased_jobs AS job FORCE INDEX (PRIMARY) JOIN JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids ON job.id = ids.value
SET job.status = 'cancelled', job.finished_at = leased_now(), job.lease_owner = NULL, job.lease_expires_at = NULL,
    job.last_error = 'workflow cancelled'
WHERE job.status IN ('waiting', 'pending', 'running', 'sleeping');

-- name: failed_steps
SELECT id, queue_name FROM leased_jobs WHERE workflow_id = %(workflow_id)s AND status = 'failed' FOR UPDATE;

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
WHERE (%(before_id)s IS NULL OR id < %(before_id)s) AND (%(workflow_name)s IS NULL OR name = %(workflow_name)s)
ORDER BY id DESC LIMIT %(limit)s;

-- name: workflow_counts
-- Steps per status of each run, how many were skipped as their `when` asked, and its open ends:
-- steps no other step waits for that did not end done (nor skipped); and the compensation steps that
-- ran. runs.workflow_status reads them.
SELECT j.workflow_id, j.status, count(*) AS n,
       sum(s.cancelled_by_parents AND s.run_when = 'failed' AND j.status = 'cancelled') AS skipped,
       sum(j.status <> 'done' AND NOT (s.cancelled_by_parents AND s.run_when = 'failed' AND j.status = 'cancelled')
           AND NOT EXISTS (SELECT 1 FROM leased_dependencies AS d WHERE d.parent_id = j.id)) AS open_ends,
       sum(s.run_when = 'failed' AND j.status <> 'cancelled') AS compensations_run
FROM JSON_TABLE(%(workflow_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids
JOIN leased_jobs AS j ON j.workflow_id = ids.value JOIN leased_steps AS s ON s.job_id = j.id
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
WHERE id IN (SELECT value FROM JSON_TABLE(%(workflow_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids)
  AND NOT EXISTS (SELECT 1 FROM leased_jobs WHERE workflow_id = leased_workflows.id);

-- Durable steps (TaskContext.step; migration 0014). Recorded after lease_fence, in its transaction.
-- name: record_durable_step
INSERT INTO leased_durable_steps (job_id, name, attempt, result, started_at, finished_at)
VALUES (%(job_id)s, %(name)s, %(attempt)s, %(result)s, leased_now() - %(seconds)s, leased_now());

-- name: durable_steps
SELECT name, attempt, result, started_at, finished_at FROM leased_durable_steps
WHERE job_id = %(job_id)s ORDER BY started_at, name;

-- Jobs that wait (backends/sql/waits.py, migration 0026).
-- name: wait_ends_at
-- A wait's end by the database's clock: the end recorded when it first began (:until), else
-- :seconds from now, else NULL (a signal with no timeout); and whether it has come.
SELECT ends_at, ends_at <= leased_now() AS due
FROM (SELECT coalesce(%(until)s, leased_now() + %(seconds)s) AS ends_at) AS wait;

-- name: oldest_signal
SELECT id, payload FROM leased_signals
WHERE job_id = %(job_id)s AND name = %(name)s AND taken_by_attempt IS NULL ORDER BY id LIMIT 1
FOR UPDATE;

-- name: take_signal
UPDATE leased_signals SET taken_by_attempt = %(attempt)s, taken_at = leased_now()
WHERE id = %(id)s AND taken_by_attempt IS NULL;

-- name: begin_wait
-- The attempt ends waiting, fenced on its lease (begin_wait's fence holds the row). max_attempts
-- grows by one: the attempt a wait ends does not count against it.
UPDATE leased_jobs
SET status = 'sleeping', lease_owner = NULL, lease_expires_at = NULL, max_attempts = max_attempts + 1
WHERE id = %(job_id)s AND attempt = %(attempt)s AND lease_owner = %(worker_id)s AND status = 'running';

-- name: set_wait
INSERT INTO leased_waits (job_id, signal_name, since, wake_at)
VALUES (%(job_id)s, %(signal_name)s, leased_now(), %(wake_at)s)
ON DUPLICATE KEY UPDATE signal_name = VALUES(signal_name), since = VALUES(since), wake_at = VALUES(wake_at);

-- name: due_waits
-- Through leased_waits_wake_at: the range of waits whose end has come, and no other. A wait another
-- waker holds is skipped: that one wakes its job.
SELECT job_id FROM leased_waits FORCE INDEX (leased_waits_wake_at)
WHERE wake_at IS NOT NULL AND wake_at <= leased_now() ORDER BY wake_at
LIMIT %(limit)s FOR UPDATE SKIP LOCKED;

-- name: wake_jobs
-- Sleeping jobs made pending, due now. :job_ids is a JSON array.
UPDATE leased_jobs AS job FORCE INDEX (PRIMARY)
JOIN JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids ON job.id = ids.value
SET status = 'pending', run_after = leased_now()
WHERE status = 'sleeping';

-- name: end_waits
-- The waits of jobs just woken. Of those due_waits read, only the ones still due: a job woken by
-- its signal meanwhile, which began a later wait, keeps that one.
DELETE wait FROM leased_waits AS wait
JOIN JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS ids ON wait.job_id = ids.value
WHERE %(due_only)s = 0 OR wait.wake_at <= leased_now();

-- name: lock_for_signal
SELECT id, status, queue_name FROM leased_jobs WHERE id = %(job_id)s FOR UPDATE;

-- name: job_with_key
-- The job an idempotency key names: its latest (an ended job's key may be taken again).
SELECT id FROM leased_jobs WHERE idempotency_key = %(key)s ORDER BY id DESC LIMIT 1;

-- name: insert_signal
INSERT INTO leased_signals (job_id, name, payload, sent_at) VALUES (%(job_id)s, %(name)s, %(payload)s, leased_now())
RETURNING id, job_id, name, payload, sent_at, taken_by_attempt, taken_at;

-- name: job_wait
SELECT job_id, signal_name, since, wake_at FROM leased_waits WHERE job_id = %(job_id)s;

-- name: job_signals
SELECT id, job_id, name, payload, sent_at, taken_by_attempt, taken_at FROM leased_signals
WHERE job_id = %(job_id)s ORDER BY id;
