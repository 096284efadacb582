-- Fairness by key within a queue (docs/howto/fairness.md; SQLite's 0029 says how it works): a
-- job's fairness key, the weights an operator sets, the waiting keys with their passes, and the
-- triggers that keep those. The plain claim's due_rank leaves fair jobs out, as it leaves out jobs
-- with a concurrency key; fair_due_key and fair_rank list them per (key, queue) in claim order (key
-- first: the counts read every pending fair job as one range).
-- Older code reads due_rank by name and never writes a fairness key: code from 21 on runs on it.
ALTER TABLE leased_jobs ADD COLUMN fairness_key VARCHAR(255);
DROP INDEX leased_jobs_due ON leased_jobs;
DROP INDEX leased_jobs_queue_due ON leased_jobs;
ALTER TABLE leased_jobs
    MODIFY COLUMN due_rank INT
        AS (CASE WHEN status = 'pending' AND concurrency_key IS NULL AND fairness_key IS NULL THEN -priority END)
        VIRTUAL,
    ADD COLUMN fair_due_key VARCHAR(255) AS (CASE WHEN status = 'pending' THEN fairness_key END) VIRTUAL,
    ADD COLUMN fair_rank INT AS (CASE WHEN status = 'pending' AND fairness_key IS NOT NULL THEN -priority END) VIRTUAL;
CREATE INDEX leased_jobs_due ON leased_jobs (due_rank, run_after, id);
CREATE INDEX leased_jobs_queue_due ON leased_jobs (queue_name, due_rank, run_after, id);
CREATE INDEX leased_jobs_fair_due ON leased_jobs (fair_due_key, queue_name, fair_rank, run_after, id);
CREATE TABLE leased_fairness_weights (
    queue_name VARCHAR(255) NOT NULL,
    fairness_key VARCHAR(255) NOT NULL,
    weight DOUBLE NOT NULL CHECK (weight > 0),
    PRIMARY KEY (queue_name, fairness_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
CREATE TABLE leased_fairness_defaults (
    queue_name VARCHAR(255) NOT NULL PRIMARY KEY,
    weight DOUBLE NOT NULL CHECK (weight > 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
CREATE TABLE leased_fair_keys (
    queue_name VARCHAR(255) NOT NULL,
    fairness_key VARCHAR(255) NOT NULL,
    pass DOUBLE NOT NULL,
    waiting INT NOT NULL,
    PRIMARY KEY (queue_name, fairness_key),
    INDEX leased_fair_keys_pass (queue_name, pass, fairness_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- A job that starts to wait counts on its key (a new key starts at its queue's least pass); one
-- that stops waiting is taken off, and a key with nothing waiting is deleted. A job without a key
-- costs one test per row written.
CREATE TRIGGER leased_fair_key_inserted AFTER INSERT ON leased_jobs FOR EACH ROW
BEGIN
    IF NEW.fairness_key IS NOT NULL AND NEW.status = 'pending' THEN
        INSERT INTO leased_fair_keys (queue_name, fairness_key, pass, waiting)
        SELECT NEW.queue_name, NEW.fairness_key,
               COALESCE((SELECT MIN(pass) FROM leased_fair_keys WHERE queue_name = NEW.queue_name), 0), 1
        FROM DUAL
        ON DUPLICATE KEY UPDATE waiting = waiting + 1;
    END IF;
END;
CREATE TRIGGER leased_fair_key_changed AFTER UPDATE ON leased_jobs FOR EACH ROW
BEGIN
    IF OLD.fairness_key IS NOT NULL AND OLD.status = 'pending'
       AND NOT (NEW.status = 'pending' AND NEW.queue_name = OLD.queue_name AND NEW.fairness_key <=> OLD.fairness_key) THEN
        UPDATE leased_fair_keys SET waiting = waiting - 1
        WHERE queue_name = OLD.queue_name AND fairness_key = OLD.fairness_key;
        DELETE FROM leased_fair_keys
        WHERE queue_name = OLD.queue_name AND fairness_key = OLD.fairness_key AND waiting <= 0;
    END IF;
    IF NEW.fairness_key IS NOT NULL AND NEW.status = 'pending'
       AND NOT (OLD.status = 'pending' AND NEW.queue_name = OLD.queue_name AND NEW.fairness_key <=> OLD.fairness_key) THEN
        INSERT INTO leased_fair_keys (queue_name, fairness_key, pass, waiting)
        SELECT NEW.queue_name, NEW.fairness_key,
               COALESCE((SELECT MIN(pass) FROM leased_fair_keys WHERE queue_name = NEW.queue_name), 0), 1
        FROM DUAL
        ON DUPLICATE KEY UPDATE waiting = waiting + 1;
    END IF;
END;
CREATE TRIGGER leased_fair_key_deleted AFTER DELETE ON leased_jobs FOR EACH ROW
BEGIN
    IF OLD.fairness_key IS NOT NULL AND OLD.status = 'pending' THEN
        UPDATE leased_fair_keys SET waiting = waiting - 1
        WHERE queue_name = OLD.queue_name AND fairness_key = OLD.fairness_key;
        DELETE FROM leased_fair_keys
        WHERE queue_name = OLD.queue_name AND fairness_key = OLD.fairness_key AND waiting <= 0;
    END IF;
END;
INSERT INTO leased_schema_compatibility (version, oldest_code_version) VALUES (29, 21);
