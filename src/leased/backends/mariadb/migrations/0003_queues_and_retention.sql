-- Settings per queue. A queue has a row once someone paused it; paused_at NULL means it runs.
CREATE TABLE leased_queues (
    queue_name VARCHAR(255) NOT NULL PRIMARY KEY,
    paused_at DOUBLE
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Done and failed jobs per minute (epoch seconds at its start), queue and task, of jobs the
-- pruner deleted: counted here in the transaction that deletes them.
CREATE TABLE leased_throughput (
    minute DOUBLE NOT NULL,
    queue_name VARCHAR(255) NOT NULL,
    task_name VARCHAR(255) NOT NULL,
    done BIGINT NOT NULL DEFAULT 0,
    failed BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, queue_name, task_name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
