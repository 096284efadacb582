-- Workers announce themselves, so the dashboard can show who is alive and what each runs.
CREATE TABLE leased_workers (
    id VARCHAR(255) NOT NULL PRIMARY KEY,
    host VARCHAR(255) NOT NULL,
    pid INT NOT NULL,
    concurrency INT NOT NULL,
    queues LONGTEXT,  -- JSON array; NULL: every queue
    tasks LONGTEXT NOT NULL,  -- JSON array
    wake_port INT,  -- UDP port on which the worker hears about new jobs (same host only)
    wake_host VARCHAR(255),  -- the host name that port is on
    started_at DOUBLE NOT NULL,
    last_seen_at DOUBLE NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Inspection at a million rows: filters keep keyset order, and "finished recently" reads a range.
CREATE INDEX leased_jobs_task ON leased_jobs (task_name, id);
CREATE INDEX leased_jobs_queue ON leased_jobs (queue_name, id);
CREATE INDEX leased_jobs_finished ON leased_jobs (finished_at);
CREATE INDEX leased_jobs_key ON leased_jobs (idempotency_key);
