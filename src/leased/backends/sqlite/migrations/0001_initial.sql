-- Times are Unix epoch seconds (REAL), taken from leased_now() on the connection that writes them.
CREATE TABLE leased_jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    task_name TEXT NOT NULL,
    queue_name TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'running', 'done', 'failed', 'cancelled')),
    priority INTEGER NOT NULL DEFAULT 0,
    args TEXT NOT NULL DEFAULT '[]',
    kwargs TEXT NOT NULL DEFAULT '{}',
    attempt INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    lease_seconds REAL NOT NULL,
    run_after REAL NOT NULL,
    created_at REAL NOT NULL,
    finished_at REAL,
    lease_owner TEXT,
    lease_expires_at REAL,
    idempotency_key TEXT,
    result TEXT,
    last_error TEXT
);

-- A key is taken while a job holding it waits for its first attempt; after that it is free again.
CREATE UNIQUE INDEX leased_jobs_idempotency_key ON leased_jobs (idempotency_key)
    WHERE status = 'pending' AND attempt = 0 AND idempotency_key IS NOT NULL;

-- The due set stays small however much history the table holds.
CREATE INDEX leased_jobs_due ON leased_jobs (priority DESC, run_after, id) WHERE status = 'pending';
CREATE INDEX leased_jobs_leases ON leased_jobs (lease_expires_at) WHERE status = 'running';
CREATE INDEX leased_jobs_status ON leased_jobs (status, id);
CREATE INDEX leased_jobs_queue_status ON leased_jobs (queue_name, status);

CREATE TABLE leased_attempts (
    job_id INTEGER NOT NULL REFERENCES leased_jobs (id) ON DELETE CASCADE,
    attempt INTEGER NOT NULL,
    worker_id TEXT NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL,
    outcome TEXT CHECK (outcome IN ('done', 'error', 'lease_lost', 'expired', 'cancelled', 'shutdown')),
    error_type TEXT,
    error_message TEXT,
    traceback TEXT,
    PRIMARY KEY (job_id, attempt)
);
