-- Concurrency and rate limits, enforced by the claim (see claim_limited in queries.sql).
ALTER TABLE leased_jobs
    ADD COLUMN concurrency_key VARCHAR(255),
    ADD COLUMN key_concurrency INT,  -- NULL: no cap on running jobs per key
    ADD COLUMN key_rate_count INT,  -- NULL: no rate limit per key
    ADD COLUMN key_rate_seconds DOUBLE,
    -- No partial indexes: the claim's indexes are on columns that are NULL outside the set each
    -- claim reads, so the due set stays small however much history the table holds. Priority is
    -- negated, so that claim order (priority DESC, run_after, id) is one ascending index scan.
    ADD COLUMN due_rank INT
        AS (CASE WHEN status = 'pending' AND concurrency_key IS NULL THEN -priority END) VIRTUAL,
    ADD COLUMN due_key VARCHAR(255)
        AS (CASE WHEN status = 'pending' THEN concurrency_key END) VIRTUAL,
    ADD COLUMN running_key VARCHAR(255)
        AS (CASE WHEN status = 'running' THEN concurrency_key END) VIRTUAL;
CREATE INDEX leased_jobs_due ON leased_jobs (due_rank, run_after, id);
CREATE INDEX leased_jobs_queue_due ON leased_jobs (queue_name, due_rank, run_after, id);
CREATE INDEX leased_jobs_keyed_due ON leased_jobs (due_key, priority, run_after, id);
CREATE INDEX leased_jobs_keyed_running ON leased_jobs (running_key);

CREATE TABLE leased_queue_limits (
    queue_name VARCHAR(255) NOT NULL PRIMARY KEY,
    concurrency INT CHECK (concurrency > 0),
    rate_count INT CHECK (rate_count > 0),
    rate_seconds DOUBLE CHECK (rate_seconds > 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One row per start of a job under a rate limit ('queue:NAME' or 'key:KEY'), kept for an hour.
CREATE TABLE leased_starts (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    limit_name VARCHAR(520) NOT NULL,
    started_at DOUBLE NOT NULL,
    INDEX leased_starts_by_limit (limit_name, started_at),
    INDEX leased_starts_at (started_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
