-- Times are timestamptz, taken from the database's now() in the statement that writes them.
CREATE TABLE leased_jobs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_name text NOT NULL,
    queue_name text NOT NULL,
    status text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'running', 'done', 'failed', 'cancelled')),
    priority integer NOT NULL DEFAULT 0,
    args json NOT NULL DEFAULT '[]',
    kwargs json NOT NULL DEFAULT '{}',
    attempt integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL,
    lease_seconds double precision NOT NULL,
    run_after timestamptz NOT NULL DEFAULT now(),
    created_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    lease_owner text,
    lease_expires_at timestamptz,
    idempotency_key text,
    result json,
    last_error text
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
    job_id bigint NOT NULL REFERENCES leased_jobs (id) ON DELETE CASCADE,
    attempt integer NOT NULL,
    worker_id text NOT NULL,
    started_at timestamptz NOT NULL,
    finished_at timestamptz,
    outcome text CHECK (outcome IN ('done', 'error', 'lease_lost', 'expired', 'cancelled', 'shutdown')),
    error_type text,
    error_message text,
    traceback text,
    PRIMARY KEY (job_id, attempt)
);
