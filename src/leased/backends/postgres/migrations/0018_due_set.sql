-- The plain claim's due set, in a table of its own whose old rows are truncated, not vacuumed.
--
-- Why: the claim read leased_jobs_due from its head, and every job claimed since the oldest open
-- transaction began left an entry there for a row version that transaction may still see. No
-- vacuum can remove those, nor can a B-tree mark them dead, so while another session sat idle in
-- a transaction each claim visited every job claimed since: pickup p50 4 ms to 40 ms and more
-- over ten minutes at 500 jobs/s (bench/long_transaction.md). A TRUNCATE removes dead row versions
-- and index entries whatever any snapshot holds (PgQ's way), so the due set is split into three
-- generations that take new rows in turn, and the oldest is truncated once its claims have emptied
-- it (leased_rotate_due, run once a second by a claiming worker). A claim then visits at most the
-- dead entries of about three rotations.
--
-- A row per pending job without a concurrency key: its claim order, and what the plain claim
-- filters on. Triggers keep it (below), so every writer of leased_jobs keeps it, whatever path
-- (retries, releases, reclaims, workflows, Django, a user's own UPDATE). Only the claims, which
-- take pending jobs to running, delete their rows themselves.
-- Generation 3 is for jobs due more than ten minutes after they were written (a schedule a day
-- ahead): they would hold up every rotation, so they stay in a generation of their own that is
-- never truncated, and claims read it like the others.
CREATE TABLE leased_due (
    generation smallint NOT NULL,
    id bigint NOT NULL,
    priority integer NOT NULL,
    run_after timestamptz NOT NULL,
    queue_name text NOT NULL,
    task_name text NOT NULL
) PARTITION BY LIST (generation);
CREATE TABLE leased_due_0 PARTITION OF leased_due FOR VALUES IN (0);
CREATE TABLE leased_due_1 PARTITION OF leased_due FOR VALUES IN (1);
CREATE TABLE leased_due_2 PARTITION OF leased_due FOR VALUES IN (2);
CREATE TABLE leased_due_later PARTITION OF leased_due FOR VALUES IN (3);
-- The one index: claim order, and how a row is found from its job (priority, run_after and id,
-- which the trigger and the claims have). An index on id alone cost 7 % more per enqueue.
CREATE INDEX leased_due_order ON leased_due (priority DESC, run_after, id);

-- Which generation takes new rows: a sequence, not a row, because a row rewritten at each rotation
-- would leave a dead version per rotation for every enqueue to step over while a transaction is
-- open. Set outside the transaction (setval is), which is safe: the rotation sets it after locking
-- the generation it names, so a writer that reads it waits for the rotation's truncate to commit.
-- Functions are created OR REPLACE and the sequence dropped first: `manage.py migrate leased zero`
-- drops the tables, and a schema made again must not trip on what outlived them.
DROP SEQUENCE IF EXISTS leased_due_current;
CREATE SEQUENCE leased_due_current MINVALUE 0 MAXVALUE 2 START WITH 0 CYCLE;

-- The generation a due row goes to.
CREATE OR REPLACE FUNCTION leased_due_generation_for(run_after timestamptz) RETURNS smallint
LANGUAGE sql STABLE
AS $$ SELECT CASE WHEN run_after > leased_now() + interval '10 minutes' THEN 3::smallint
                  ELSE (SELECT last_value FROM leased_due_current)::smallint END $$;

-- Inserted jobs, a statement at a time: a bulk enqueue adds its due rows in one INSERT.
CREATE OR REPLACE FUNCTION leased_due_inserted() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO leased_due (generation, id, priority, run_after, queue_name, task_name)
    SELECT leased_due_generation_for(run_after), id, priority, run_after, queue_name, task_name
    FROM inserted WHERE status = 'pending' AND concurrency_key IS NULL;
    RETURN NULL;
END
$$;
CREATE TRIGGER leased_jobs_due_inserted AFTER INSERT ON leased_jobs
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION leased_due_inserted();

-- A job that leaves the due set or enters it (a retry, a release, a reclaim, a released workflow
-- step, a cancel), or is moved in it. A row a claim has locked is skipped, not waited for: that
-- claim deletes it, and a claim holds its due rows while it waits for the jobs' rows, which the
-- writer here holds (waiting would deadlock the two).
CREATE OR REPLACE FUNCTION leased_due_changed() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.status = 'pending' AND OLD.concurrency_key IS NULL THEN
        DELETE FROM leased_due WHERE (generation, priority, run_after, id) IN (
            SELECT generation, priority, run_after, id FROM leased_due
            WHERE priority = OLD.priority AND run_after = OLD.run_after AND id = OLD.id FOR UPDATE SKIP LOCKED);
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.status = 'pending' AND NEW.concurrency_key IS NULL THEN
        INSERT INTO leased_due (generation, id, priority, run_after, queue_name, task_name)
        VALUES (leased_due_generation_for(NEW.run_after), NEW.id, NEW.priority, NEW.run_after, NEW.queue_name,
                NEW.task_name);
    END IF;
    RETURN NULL;
END
$$;
-- The condition is checked without entering PL/pgSQL: renewals and finishes never do.
CREATE TRIGGER leased_jobs_due_changed AFTER UPDATE ON leased_jobs FOR EACH ROW
    WHEN ((OLD.status = 'pending' OR NEW.status = 'pending')
          AND NOT (OLD.status = 'pending' AND NEW.status = 'running')  -- a claim's own
          AND (OLD.status, OLD.run_after, OLD.priority, OLD.queue_name, OLD.task_name, OLD.concurrency_key)
              IS DISTINCT FROM (NEW.status, NEW.run_after, NEW.priority, NEW.queue_name, NEW.task_name,
                                NEW.concurrency_key))
    EXECUTE FUNCTION leased_due_changed();
CREATE TRIGGER leased_jobs_due_deleted AFTER DELETE ON leased_jobs FOR EACH ROW
    WHEN (OLD.status = 'pending')
    EXECUTE FUNCTION leased_due_changed();

-- One rotation, if one is due: when the current generation has grown to min_bytes, and the oldest
-- holds at most most_rows jobs still pending (a backlog is left to its claims first). Those are
-- copied into the current generation, the oldest is truncated, and it takes new rows from now on.
-- Returns whether it rotated. It never waits: with another rotation under way, or a claim or a
-- writer on the oldest generation, it returns false, and the next call tries again.
CREATE OR REPLACE FUNCTION leased_rotate_due(min_bytes bigint, most_rows integer) RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    newest smallint := (SELECT last_value FROM leased_due_current);
    oldest smallint := (newest + 1) % 3;
    oldest_table regclass := format('leased_due_%s', oldest)::regclass;
    pending integer;
BEGIN
    IF pg_relation_size(format('leased_due_%s', newest)::regclass) < min_bytes
       OR NOT pg_try_advisory_xact_lock(hashtext('leased.due.' || current_schema())) THEN
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
                              CROSS JOIN LATERAL (SELECT status FROM leased_jobs WHERE id = due.id LIMIT 1) AS job
                              WHERE job.status = 'pending' LIMIT $1) AS rows$count$, oldest_table)
        INTO pending USING most_rows + 1;
    IF pending > most_rows THEN
        RETURN false;
    END IF;
    PERFORM setval('leased_due_current', oldest);
    -- Rows of jobs still pending move on, to the generation that was current; rows a claim or a
    -- cancel left behind do not.
    EXECUTE format($copy$
        INSERT INTO leased_due (generation, id, priority, run_after, queue_name, task_name)
        SELECT DISTINCT ON (job.id) $1, job.id, job.priority, job.run_after, job.queue_name, job.task_name
        FROM %s AS due
        CROSS JOIN LATERAL (SELECT id, status, priority, run_after, queue_name, task_name, concurrency_key
                            FROM leased_jobs WHERE id = due.id LIMIT 1) AS job
        WHERE job.status = 'pending' AND job.concurrency_key IS NULL$copy$, oldest_table)
        USING newest;
    EXECUTE format('TRUNCATE %s', oldest_table);
    RETURN true;
END
$$;

-- The jobs pending now.
INSERT INTO leased_due (generation, id, priority, run_after, queue_name, task_name)
SELECT leased_due_generation_for(run_after), id, priority, run_after, queue_name, task_name
FROM leased_jobs WHERE status = 'pending' AND concurrency_key IS NULL;
