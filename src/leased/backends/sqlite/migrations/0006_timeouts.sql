-- Time limits. Each job carries its own (NULL: none), so a worker applies what the enqueuer chose.
ALTER TABLE leased_jobs ADD COLUMN timeout_seconds REAL;

-- Workers announce how many handler threads still run past their job's limit, each holding a slot.
ALTER TABLE leased_workers ADD COLUMN stuck_handlers INTEGER NOT NULL DEFAULT 0;

-- A new outcome, 'timeout'. SQLite cannot change a CHECK constraint in place, so the table is
-- rebuilt: one copy of the attempt history, once.
CREATE TABLE leased_attempts_new (
    job_id INTEGER NOT NULL REFERENCES leased_jobs (id) ON DELETE CASCADE,
    attempt INTEGER NOT NULL,
    worker_id TEXT NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL,
    outcome TEXT CHECK (outcome IN ('done', 'error', 'lease_lost', 'expired', 'cancelled', 'shutdown', 'timeout')),
    error_type TEXT,
    error_message TEXT,
    traceback TEXT,
    PRIMARY KEY (job_id, attempt)
);
INSERT INTO leased_attempts_new SELECT * FROM leased_attempts;
DROP TABLE leased_attempts;
ALTER TABLE leased_attempts_new RENAME TO leased_attempts;
