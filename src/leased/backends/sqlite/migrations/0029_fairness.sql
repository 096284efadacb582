-- Weighted, work-conserving fairness by key within a queue (docs/howto/fairness.md): a job may
-- carry a fairness key (a tenant's id), and the claim shares a queue's starts between the keys
-- with waiting jobs in proportion to their weights, by stride scheduling: each waiting key has a
-- virtual `pass`, a claim takes the key with the least pass, and each job it takes advances that
-- key's pass by 1/weight. A claim reads a few rows per job it takes, however many keys wait.
ALTER TABLE leased_jobs ADD COLUMN fairness_key TEXT;

-- The plain claim's indexes leave fair jobs out, as they leave out jobs with a concurrency key: a
-- backlog of fair jobs never sits at the head of the plain claim's scan. (Code before this version
-- names these indexes for a query the new predicate no longer implies: it cannot run beside it.)
DROP INDEX leased_jobs_due;
CREATE INDEX leased_jobs_due ON leased_jobs (priority DESC, run_after, id)
    WHERE status = 'pending' AND concurrency_key IS NULL AND fairness_key IS NULL;
DROP INDEX leased_jobs_queue_due;
CREATE INDEX leased_jobs_queue_due ON leased_jobs (queue_name, priority DESC, run_after, id)
    WHERE status = 'pending' AND concurrency_key IS NULL AND fairness_key IS NULL;
-- A key's jobs in claim order: the fair claim reads only as many of a key's jobs as it may take.
CREATE INDEX leased_jobs_fair_due ON leased_jobs (queue_name, fairness_key, priority DESC, run_after, id)
    WHERE status = 'pending' AND fairness_key IS NOT NULL;

-- One row per (queue, key) with waiting jobs: its pass, and how many of its jobs are pending. The
-- triggers below keep `waiting`, whatever writes the jobs (enqueue, claim, retry, reclaim, cancel,
-- prune, workflows, Django), and delete the row when it reaches 0: an idle key banks no credit.
-- A key that becomes active again starts at its queue's least pass.
CREATE TABLE leased_fair_keys (
    queue_name TEXT NOT NULL,
    fairness_key TEXT NOT NULL,
    pass REAL NOT NULL,
    waiting INTEGER NOT NULL,
    PRIMARY KEY (queue_name, fairness_key)
);
CREATE INDEX leased_fair_keys_pass ON leased_fair_keys (queue_name, pass, fairness_key);

-- Weights an operator sets (`leased fairness`, Leased.fairness): per key, and a queue's default
-- for keys not listed (1 where none is set). Kept apart from leased_fair_keys, whose rows come and go.
CREATE TABLE leased_fairness_weights (
    queue_name TEXT NOT NULL,
    fairness_key TEXT NOT NULL,
    weight REAL NOT NULL CHECK (weight > 0),
    PRIMARY KEY (queue_name, fairness_key)
);
CREATE TABLE leased_fairness_defaults (
    queue_name TEXT PRIMARY KEY,
    weight REAL NOT NULL CHECK (weight > 0)
);

CREATE TRIGGER leased_fair_key_inserted AFTER INSERT ON leased_jobs
WHEN new.fairness_key IS NOT NULL AND new.status = 'pending'
BEGIN
    INSERT INTO leased_fair_keys (queue_name, fairness_key, pass, waiting)
    VALUES (new.queue_name, new.fairness_key,
            coalesce((SELECT min(pass) FROM leased_fair_keys WHERE queue_name = new.queue_name), 0), 1)
    ON CONFLICT (queue_name, fairness_key) DO UPDATE SET waiting = waiting + 1;
END;

CREATE TRIGGER leased_fair_key_left AFTER UPDATE OF status, queue_name, fairness_key ON leased_jobs
WHEN old.fairness_key IS NOT NULL AND old.status = 'pending'
     AND NOT (new.status = 'pending' AND new.queue_name = old.queue_name AND new.fairness_key IS old.fairness_key)
BEGIN
    UPDATE leased_fair_keys SET waiting = waiting - 1
    WHERE queue_name = old.queue_name AND fairness_key = old.fairness_key;
    DELETE FROM leased_fair_keys
    WHERE queue_name = old.queue_name AND fairness_key = old.fairness_key AND waiting <= 0;
END;

CREATE TRIGGER leased_fair_key_entered AFTER UPDATE OF status, queue_name, fairness_key ON leased_jobs
WHEN new.fairness_key IS NOT NULL AND new.status = 'pending'
     AND NOT (old.status = 'pending' AND new.queue_name = old.queue_name AND new.fairness_key IS old.fairness_key)
BEGIN
    INSERT INTO leased_fair_keys (queue_name, fairness_key, pass, waiting)
    VALUES (new.queue_name, new.fairness_key,
            coalesce((SELECT min(pass) FROM leased_fair_keys WHERE queue_name = new.queue_name), 0), 1)
    ON CONFLICT (queue_name, fairness_key) DO UPDATE SET waiting = waiting + 1;
END;

CREATE TRIGGER leased_fair_key_deleted AFTER DELETE ON leased_jobs
WHEN old.fairness_key IS NOT NULL AND old.status = 'pending'
BEGIN
    UPDATE leased_fair_keys SET waiting = waiting - 1
    WHERE queue_name = old.queue_name AND fairness_key = old.fairness_key;
    DELETE FROM leased_fair_keys
    WHERE queue_name = old.queue_name AND fairness_key = old.fairness_key AND waiting <= 0;
END;

INSERT INTO leased_schema_compatibility (version, oldest_code_version) VALUES (29, 29);
