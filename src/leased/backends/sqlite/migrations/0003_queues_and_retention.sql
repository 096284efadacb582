-- Settings per queue. A queue has a row once someone paused it; paused_at NULL means it runs.
CREATE TABLE leased_queues (
    queue_name TEXT PRIMARY KEY,
    paused_at REAL
);

-- Done and failed jobs per minute (epoch seconds at its start), queue and task, of jobs the
-- pruner deleted: it counts them here in the transaction that deletes them, so every finished job
-- is counted once, as a row of leased_jobs or in here.
CREATE TABLE leased_throughput (
    minute REAL NOT NULL,
    queue_name TEXT NOT NULL,
    task_name TEXT NOT NULL,
    done INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, queue_name, task_name)
);
