-- Durable steps (TaskContext.step): a step's result, recorded once by the attempt that ran it
-- (fenced on its lease), read by the job's later attempts instead of running the step again.
CREATE TABLE leased_durable_steps (
    job_id INTEGER NOT NULL REFERENCES leased_jobs (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    result TEXT,
    started_at REAL NOT NULL,
    finished_at REAL NOT NULL,
    PRIMARY KEY (job_id, name)
);
