-- Concurrency and rate limits, enforced by the claim (see claim_limited in queries.sql).
-- A job's concurrency key and its key's limits are written at enqueue, from the task.
ALTER TABLE leased_jobs ADD COLUMN concurrency_key TEXT;
ALTER TABLE leased_jobs ADD COLUMN key_concurrency INTEGER;  -- NULL: no cap on running jobs per key
ALTER TABLE leased_jobs ADD COLUMN key_rate_count INTEGER;  -- NULL: no rate limit per key
ALTER TABLE leased_jobs ADD COLUMN key_rate_seconds REAL;

-- The due index holds only jobs without a key: jobs held back by their key never sit at the head
-- of the plain claim's scan, however many wait.
DROP INDEX leased_jobs_due;
CREATE INDEX leased_jobs_due ON leased_jobs (priority DESC, run_after, id)
    WHERE status = 'pending' AND concurrency_key IS NULL;
-- Keyed jobs in claim order within each key: the claim visits each waiting key once, and reads only
-- as many of its jobs as the key has room for.
CREATE INDEX leased_jobs_keyed_due ON leased_jobs (concurrency_key, priority DESC, run_after, id)
    WHERE status = 'pending' AND concurrency_key IS NOT NULL;
CREATE INDEX leased_jobs_keyed_running ON leased_jobs (concurrency_key)
    WHERE status = 'running' AND concurrency_key IS NOT NULL;
-- The head of one queue, for queues with a limit.
CREATE INDEX leased_jobs_queue_due ON leased_jobs (queue_name, priority DESC, run_after, id)
    WHERE status = 'pending' AND concurrency_key IS NULL;

CREATE TABLE leased_queue_limits (
    queue_name TEXT PRIMARY KEY,
    concurrency INTEGER CHECK (concurrency > 0),  -- NULL: no cap on running jobs
    rate_count INTEGER CHECK (rate_count > 0),  -- NULL: no rate limit
    rate_seconds REAL CHECK (rate_seconds > 0)
);

-- One row per start of a job under a rate limit ('queue:NAME' or 'key:KEY'), kept for the longest
-- window (an hour): the sliding window counts them.
CREATE TABLE leased_starts (
    limit_name TEXT NOT NULL,
    started_at REAL NOT NULL
);
CREATE INDEX leased_starts_by_limit ON leased_starts (limit_name, started_at);
CREATE INDEX leased_starts_at ON leased_starts (started_at);
