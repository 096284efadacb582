-- Jobs that wait (TaskContext.sleep and wait_for, Leased.signal; issue 46). A job whose handler
-- waits for a time or a signal is 'sleeping': its attempt ended (recorded with the new outcome
-- 'waited'), it holds no lease and no slot, and no claim reads it until it wakes (the due index's
-- generated columns are NULL outside 'pending'). 'waiting' stays what it was: a workflow's step
-- whose parents have not all ended. Loosening the CHECKs is done in place, as 0013 and 0016 did.
ALTER TABLE leased_jobs
    MODIFY status VARCHAR(16) NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'running', 'done', 'failed', 'cancelled', 'waiting', 'sleeping'));
ALTER TABLE leased_attempts DROP CONSTRAINT leased_attempts_outcome,
    ADD CONSTRAINT leased_attempts_outcome CHECK (outcome IN ('done', 'error', 'lease_lost', 'expired', 'cancelled',
                                                              'shutdown', 'timeout', 'crashed', 'waited'));

-- What a sleeping job waits for: a time (signal_name NULL), or a signal until wake_at (NULL: no
-- timeout). Its end is found through leased_waits_wake_at, a range of the waits that are due: no
-- read of the other sleepers, nor of leased_jobs' hot indexes.
CREATE TABLE leased_waits (
    job_id BIGINT NOT NULL PRIMARY KEY,
    signal_name VARCHAR(255),
    since DOUBLE NOT NULL,
    wake_at DOUBLE,
    INDEX leased_waits_wake_at (wake_at),
    CONSTRAINT leased_waits_job FOREIGN KEY (job_id) REFERENCES leased_jobs (id) ON DELETE CASCADE
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- A job's mailbox: each signal taken once, oldest first, by the attempt that took it (recorded with
-- the durable step that returned its payload, in the same transaction).
CREATE TABLE leased_signals (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    job_id BIGINT NOT NULL,
    name VARCHAR(255) NOT NULL,
    payload LONGTEXT,
    sent_at DOUBLE NOT NULL,
    taken_by_attempt INT,  -- NULL: not taken yet
    taken_at DOUBLE,
    INDEX leased_signals_job (job_id, name, id),
    CONSTRAINT leased_signals_job FOREIGN KEY (job_id) REFERENCES leased_jobs (id) ON DELETE CASCADE
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- New tables, and looser checks: code from version 21 on runs on it, until a job sleeps (older code
-- reads no 'sleeping' status: see docs/upgrading.md).
INSERT INTO leased_schema_compatibility (version, oldest_code_version) VALUES (26, 21);
