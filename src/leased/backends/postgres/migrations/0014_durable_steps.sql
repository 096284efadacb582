-- Durable steps (TaskContext.step): a step's result, recorded once by the attempt that ran it
-- (fenced on its lease), read by the job's later attempts instead of running the step again.
CREATE TABLE leased_durable_steps (
    job_id bigint NOT NULL REFERENCES leased_jobs (id) ON DELETE CASCADE,
    name text NOT NULL,
    attempt integer NOT NULL,
    result json,
    started_at timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    PRIMARY KEY (job_id, name)
);
