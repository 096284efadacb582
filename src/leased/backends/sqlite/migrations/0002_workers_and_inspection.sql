-- Workers announce themselves, so the dashboard can show who is alive and what each runs.
CREATE TABLE leased_workers (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    concurrency INTEGER NOT NULL,
    queues TEXT,  -- JSON array; NULL: every queue
    tasks TEXT NOT NULL,  -- JSON array
    wake_port INTEGER,  -- loopback UDP port on which the worker hears about new jobs
    started_at REAL NOT NULL,
    last_seen_at REAL NOT NULL
);

-- Inspection at a million rows: filters keep keyset order, and "finished recently" reads a range.
CREATE INDEX leased_jobs_task ON leased_jobs (task_name, id);
CREATE INDEX leased_jobs_queue ON leased_jobs (queue_name, id);
CREATE INDEX leased_jobs_finished ON leased_jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX leased_jobs_key ON leased_jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;
