-- Durable steps (TaskContext.step): a step's result, recorded once by the attempt that ran it
-- (fenced on its lease), read by the job's later attempts instead of running the step again.
CREATE TABLE leased_durable_steps (
    job_id BIGINT NOT NULL,
    name VARCHAR(255) NOT NULL,
    attempt INT NOT NULL,
    result LONGTEXT,
    started_at DOUBLE NOT NULL,
    finished_at DOUBLE NOT NULL,
    PRIMARY KEY (job_id, name),
    CONSTRAINT leased_durable_steps_job FOREIGN KEY (job_id) REFERENCES leased_jobs (id) ON DELETE CASCADE
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
