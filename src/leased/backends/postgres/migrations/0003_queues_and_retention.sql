-- Settings per queue. A queue has a row once someone paused it; paused_at NULL means it runs.
CREATE TABLE leased_queues (
    queue_name text PRIMARY KEY,
    paused_at timestamptz
);

-- Done and failed jobs per minute, queue and task, of jobs the pruner deleted: it counts them
-- here in the statement that deletes them, so every finished job is counted once, as a row of
-- leased_jobs or in here.
CREATE TABLE leased_throughput (
    minute timestamptz NOT NULL,
    queue_name text NOT NULL,
    task_name text NOT NULL,
    done bigint NOT NULL DEFAULT 0,
    failed bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, queue_name, task_name)
);
