-- A new outcome, 'crashed': a process-isolated handler's child died mid-job (engine/children.py).
-- SQLite cannot change a CHECK constraint in place, so the table is rebuilt: one copy of the
-- attempt history, once.
CREATE TABLE leased_attempts_new (
    job_id INTEGER NOT NULL REFERENCES leased_jobs (id) ON DELETE CASCADE,
    attempt INTEGER NOT NULL,
    worker_id TEXT NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL,
    outcome TEXT CHECK (outcome IN ('done', 'error', 'lease_lost', 'expired', 'cancelled', 'shutdown', 'timeout',
                                    'crashed')),
    error_type TEXT,
    error_message TEXT,
    traceback TEXT,
    progress TEXT,
    PRIMARY KEY (job_id, attempt)
);
INSERT INTO leased_attempts_new (job_id, attempt, worker_id, started_at, finished_at, outcome, error_type,
                                 error_message, traceback, progress)
SELECT job_id, attempt, worker_id, started_at, finished_at, outcome, error_type, error_message, traceback, progress
FROM leased_attempts;
DROP TABLE leased_attempts;
ALTER TABLE leased_attempts_new RENAME TO leased_attempts;
