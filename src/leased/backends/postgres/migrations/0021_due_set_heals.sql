-- The due set heals itself: no state of it keeps a pending job from a worker for more than a poll.
--
-- Why: migration 0019 made leased_due exact at every commit, but only for writes its row triggers
-- see. Three kinds of write they miss left rows behind, and a row left at the head of the claim
-- order was read by every claim and never claimed nor deleted, so a worker sat idle beside pending
-- jobs (a fresh worker after `TRUNCATE leased_jobs, leased_attempts CASCADE`: 13 of 13 runs):
-- - a TRUNCATE fires no row trigger, and leased_due has no foreign key for CASCADE to follow;
-- - an older release's claim (before 0018) takes jobs to running without deleting their rows, and
--   the update trigger skips pending -> running, which leased's own claims handle themselves;
-- - writes with triggers off (session_replication_role = replica, a restore, a replica's apply).
-- With ids reused (RESTART IDENTITY, a restore), a left row also claimed whatever job now had its
-- id, out of order, in another queue, past a pause. The claims change with this migration too
-- (queries.sql): a due row claims only the job it was written for, and a claim that meets a row
-- whose job is gone or has moved deletes it and claims again at once.

-- A TRUNCATE of leased_jobs empties the due set. TRUNCATE of leased_due would wait for its
-- ACCESS EXCLUSIVE lock behind a claim that holds leased_due and waits for leased_jobs, which this
-- TRUNCATE holds: a deadlock. So it is tried without waiting, and otherwise the rows are deleted,
-- which waits for no claim (a claim that holds due rows holds leased_jobs already, so none does).
CREATE OR REPLACE FUNCTION leased_due_truncated() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    BEGIN
        LOCK TABLE leased_due IN ACCESS EXCLUSIVE MODE NOWAIT;
        TRUNCATE leased_due;
    EXCEPTION WHEN lock_not_available THEN
        DELETE FROM leased_due;
    END;
    RETURN NULL;
END
$$;
CREATE TRIGGER leased_jobs_due_truncated AFTER TRUNCATE ON leased_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION leased_due_truncated();

-- pending -> running is skipped only for leased's own claims, which delete their jobs' due rows in
-- the claim and say so with a setting (claim_settings in queries.sql): any other claim, an older
-- release's or an operator's UPDATE, has the trigger delete the row. current_setting is read
-- without entering PL/pgSQL, so a claim of this release costs no more than before.
DROP TRIGGER leased_jobs_due_changed ON leased_jobs;
CREATE TRIGGER leased_jobs_due_changed AFTER UPDATE ON leased_jobs FOR EACH ROW
    WHEN ((OLD.status = 'pending' OR NEW.status = 'pending')
          AND NOT (OLD.status = 'pending' AND NEW.status = 'running'
                   AND current_setting('leased.claims_own_due_rows', true) IS NOT DISTINCT FROM 'on')
          AND (OLD.status, OLD.run_after, OLD.priority, OLD.queue_name, OLD.task_name, OLD.concurrency_key)
              IS DISTINCT FROM (NEW.status, NEW.run_after, NEW.priority, NEW.queue_name, NEW.task_name,
                                NEW.concurrency_key))
    EXECUTE FUNCTION leased_due_changed();

-- Whether any row of a generation holds (see below): its jobs wait in it.
CREATE OR REPLACE FUNCTION leased_due_generation_holds_a_job(generation_table regclass) RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    holds boolean;
BEGIN
    EXECUTE format($holds$
        SELECT EXISTS (SELECT FROM %s AS due
                       CROSS JOIN LATERAL (
                           SELECT FROM leased_jobs
                           WHERE id = due.id AND status = 'pending' AND concurrency_key IS NULL
                             AND (priority, run_after, queue_name, task_name)
                                 = (due.priority, due.run_after, due.queue_name, due.task_name)
                           LIMIT 1) AS job)$holds$, generation_table)
        INTO holds;
    RETURN holds;
END
$$;

-- A generation other than the current one that no longer holds a job (a drained burst's) is
-- truncated at once, not rotations later: each rotation waits for 64 KB of new enqueues, and until
-- the third one every claim stepped over the burst's dead entries (a million jobs drained: the first
-- claim 157 ms, later ones 7-10 ms against about 1). Writers add rows to the current generation
-- only, so a look, the lock without waiting and a last look are all it takes. Called by the
-- rotation, under its advisory lock, when no rotation is due. Returns whether it truncated one.
CREATE OR REPLACE FUNCTION leased_truncate_drained_due(current_generation smallint) RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    generation smallint;
    drained regclass;
BEGIN
    FOR generation IN SELECT other FROM unnest(ARRAY[0, 1, 2]::smallint[]) AS other
                      WHERE other <> current_generation LOOP
        drained := format('leased_due_%s', generation)::regclass;
        CONTINUE WHEN pg_relation_size(drained) = 0 OR leased_due_generation_holds_a_job(drained);
        BEGIN
            EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE NOWAIT', drained);
        EXCEPTION WHEN lock_not_available THEN
            CONTINUE;
        END;
        CONTINUE WHEN leased_due_generation_holds_a_job(drained);
        EXECUTE format('TRUNCATE %s', drained);
        RETURN true;
    END LOOP;
    RETURN false;
END
$$;

-- A due row holds when its job is pending without a key, at the priority, due time, queue and task
-- the row says: every reader that trusts a row against its job asks that (the claims, the rotation,
-- the mend), as (priority, run_after, queue_name, task_name) compared whole.
--
-- The rotation as in 0018, but what it counts and carries over is the rows that hold: a row left
-- behind for a job that is gone, or whose id another job now has, neither holds a rotation back
-- nor moves on with it; the truncate drops it.
CREATE OR REPLACE FUNCTION leased_rotate_due(min_bytes bigint, most_rows integer) RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    newest smallint := (SELECT last_value FROM leased_due_current);
    oldest smallint := (newest + 1) % 3;
    oldest_table regclass := format('leased_due_%s', oldest)::regclass;
    pending integer;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('leased.due.' || current_schema())) THEN
        RETURN false;
    END IF;
    IF pg_relation_size(format('leased_due_%s', newest)::regclass) < min_bytes THEN
        PERFORM leased_truncate_drained_due(newest);
        RETURN false;
    END IF;
    BEGIN
        EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE NOWAIT', oldest_table);
    EXCEPTION WHEN lock_not_available THEN
        RETURN false;
    END;
    IF newest <> (SELECT last_value FROM leased_due_current) THEN
        RETURN false;  -- another rotation committed since this one read the sequence
    END IF;
    -- Each job by its primary key (LIMIT 1: no other plan): a join may hash the whole of
    -- leased_jobs, which a held horizon swells, while this holds the lock every claim waits for.
    EXECUTE format($count$
        SELECT count(*) FROM (SELECT FROM %s AS due
                              CROSS JOIN LATERAL (
                                  SELECT FROM leased_jobs
                                  WHERE id = due.id AND status = 'pending' AND concurrency_key IS NULL
                                    AND (priority, run_after, queue_name, task_name)
                                        = (due.priority, due.run_after, due.queue_name, due.task_name)
                                  LIMIT 1) AS job
                              LIMIT $1) AS rows$count$, oldest_table)
        INTO pending USING most_rows + 1;
    IF pending > most_rows THEN
        RETURN false;
    END IF;
    PERFORM setval('leased_due_current', oldest);
    EXECUTE format($copy$
        INSERT INTO leased_due (generation, id, priority, run_after, queue_name, task_name)
        SELECT DISTINCT ON (due.id) $1, due.id, due.priority, due.run_after, due.queue_name, due.task_name
        FROM %s AS due
        CROSS JOIN LATERAL (SELECT FROM leased_jobs
                            WHERE id = due.id AND status = 'pending' AND concurrency_key IS NULL
                              AND (priority, run_after, queue_name, task_name)
                                  = (due.priority, due.run_after, due.queue_name, due.task_name)
                            LIMIT 1) AS job$copy$, oldest_table)
        USING newest;
    EXECUTE format('TRUNCATE %s', oldest_table);
    RETURN true;
END
$$;

-- The due set made exact again whatever wrote the jobs: rows that do not hold dropped, a row added
-- for each pending job without a key that lacks one (a job written with triggers off). It reads
-- the whole of leased_jobs, so it runs once per worker process, at its first claim, and one at a
-- time (a second caller returns at once: the first's work is the same). A job another session
-- holds is skipped: that writer's trigger gives it its row.
CREATE OR REPLACE FUNCTION leased_mend_due(OUT dropped bigint, OUT added bigint)
LANGUAGE plpgsql
AS $$
BEGIN
    dropped := 0;
    added := 0;
    IF NOT pg_try_advisory_xact_lock(hashtext('leased.due.mend.' || current_schema())) THEN
        RETURN;
    END IF;
    DELETE FROM leased_due AS due WHERE NOT EXISTS (
        SELECT FROM leased_jobs AS job
        WHERE job.id = due.id AND job.status = 'pending' AND job.concurrency_key IS NULL
          AND (job.priority, job.run_after, job.queue_name, job.task_name)
              = (due.priority, due.run_after, due.queue_name, due.task_name));
    GET DIAGNOSTICS dropped = ROW_COUNT;
    INSERT INTO leased_due (generation, id, priority, run_after, queue_name, task_name)
    SELECT leased_due_generation_for(job.run_after), job.id, job.priority, job.run_after, job.queue_name, job.task_name
    FROM leased_jobs AS job
    WHERE job.status = 'pending' AND job.concurrency_key IS NULL
      AND NOT EXISTS (SELECT FROM leased_due AS due
                      WHERE (due.id, due.priority, due.run_after, due.queue_name, due.task_name)
                            = (job.id, job.priority, job.run_after, job.queue_name, job.task_name))
    FOR UPDATE OF job SKIP LOCKED;
    GET DIAGNOSTICS added = ROW_COUNT;
END
$$;

-- Why a pending job's row cannot be claimed, or NULL when it can: a row no enqueue of leased
-- writes (another program's, a DBA's) whose attempt cannot grow or whose lease cannot be computed
-- failed the whole claim statement, every claim, so nothing in the database ran. The claims fail
-- such a job with this text instead (queries.sql), and claim the rest. A SQL function: inlined.
CREATE OR REPLACE FUNCTION leased_refused_row(attempt integer, lease_seconds double precision) RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT 'RowRefused: ' || CASE WHEN attempt >= 2147483647 THEN 'attempt ' || attempt
                                    ELSE 'lease_seconds ' || lease_seconds END
             || ' is out of range; the row was not written by leased''s enqueue'
      WHERE NOT (attempt < 2147483647 AND lease_seconds > 0 AND lease_seconds <= 86400) $$;

-- Rows an older release's claims or a TRUNCATE left before this migration.
SELECT leased_mend_due();
