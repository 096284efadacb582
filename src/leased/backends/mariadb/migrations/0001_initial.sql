-- Times are Unix epoch seconds with microseconds (DOUBLE), taken from the server's clock
-- (UNIX_TIMESTAMP(NOW(6))) by the statement that writes them: no worker's clock decides a lease.
-- Payloads are LONGTEXT holding the JSON text as the producer wrote it: byte for byte, key order kept.
CREATE TABLE leased_jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    task_name VARCHAR(255) NOT NULL,
    queue_name VARCHAR(255) NOT NULL,
    status VARCHAR(16) NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'running', 'done', 'failed', 'cancelled')),
    priority INT NOT NULL DEFAULT 0,
    args LONGTEXT NOT NULL,
    kwargs LONGTEXT NOT NULL,
    attempt INT NOT NULL DEFAULT 0,
    max_attempts INT NOT NULL,
    lease_seconds DOUBLE NOT NULL,
    run_after DOUBLE NOT NULL,
    created_at DOUBLE NOT NULL,
    finished_at DOUBLE,
    lease_owner VARCHAR(255),
    lease_expires_at DOUBLE,
    idempotency_key VARCHAR(255),
    result LONGTEXT,
    last_error LONGTEXT,
    -- No partial indexes: a key is taken while a job holding it waits for its first attempt, so
    -- this column holds the key only then (NULL after), and a unique index on it does the rest.
    waiting_key VARCHAR(255) AS (CASE WHEN status = 'pending' AND attempt = 0 THEN idempotency_key END) VIRTUAL,
    running_expires_at DOUBLE AS (CASE WHEN status = 'running' THEN lease_expires_at END) VIRTUAL,
    UNIQUE INDEX leased_jobs_idempotency_key (waiting_key),
    INDEX leased_jobs_leases (running_expires_at),
    INDEX leased_jobs_status (status, id),
    INDEX leased_jobs_queue_status (queue_name, status)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE leased_attempts (
    job_id BIGINT NOT NULL,
    attempt INT NOT NULL,
    worker_id VARCHAR(255) NOT NULL,
    started_at DOUBLE NOT NULL,
    finished_at DOUBLE,
    outcome VARCHAR(16),
    error_type VARCHAR(255),
    error_message LONGTEXT,
    traceback LONGTEXT,
    PRIMARY KEY (job_id, attempt),
    CONSTRAINT leased_attempts_outcome CHECK (outcome IN ('done', 'error', 'lease_lost', 'expired', 'cancelled', 'shutdown')),
    CONSTRAINT leased_attempts_job FOREIGN KEY (job_id) REFERENCES leased_jobs (id) ON DELETE CASCADE
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
