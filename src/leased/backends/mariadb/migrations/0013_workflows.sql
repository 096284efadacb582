-- Workflows (leased/workflows.py): a step is a job, with a row in leased_steps and one row in
-- leased_dependencies per parent. A step whose parents have not all ended is 'waiting': no claim
-- reads that status. Loosening the column's CHECK is done in place.
ALTER TABLE leased_jobs
    MODIFY status VARCHAR(16) NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'running', 'done', 'failed', 'cancelled', 'waiting')),
    ADD COLUMN workflow_id BIGINT,  -- NULL: a job of no workflow
    -- Waiting steps per queue, counted exactly as the due set is (count_active): NULL outside it.
    ADD COLUMN waiting_queue VARCHAR(255) AS (CASE WHEN status = 'waiting' THEN queue_name END) VIRTUAL;
CREATE INDEX leased_jobs_workflow ON leased_jobs (workflow_id);
CREATE INDEX leased_jobs_waiting ON leased_jobs (waiting_queue);

CREATE TABLE leased_workflows (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name VARCHAR(255) NOT NULL,
    -- Held while the run is unfinished; an enqueue with the key of a finished run frees it first.
    idempotency_key VARCHAR(255) UNIQUE,
    created_at DOUBLE NOT NULL,
    INDEX leased_workflows_name (name, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- A step's place in its workflow. parents_left counts the parents not ended yet, parents_failed
-- those that ended failed or cancelled: the finish of the last parent decides, from them and
-- run_when, whether the step becomes pending or is cancelled, in the finish's own transaction.
CREATE TABLE leased_steps (
    job_id BIGINT NOT NULL PRIMARY KEY,
    workflow_id BIGINT NOT NULL,
    name VARCHAR(255) NOT NULL,
    run_when VARCHAR(16) NOT NULL CHECK (run_when IN ('succeeded', 'finished', 'failed')),
    parents_left INT NOT NULL DEFAULT 0,
    parents_failed INT NOT NULL DEFAULT 0,
    previous_id BIGINT,  -- a chain's step before this one, whose result becomes its first argument
    added_by BIGINT,  -- the running step that added it (fan-out at run time), or NULL
    cancelled_by_parents BOOLEAN NOT NULL DEFAULT FALSE,  -- cancelled when its parents settled, not by a person
    UNIQUE KEY leased_steps_name (workflow_id, name),
    CONSTRAINT leased_steps_job FOREIGN KEY (job_id) REFERENCES leased_jobs (id) ON DELETE CASCADE
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE leased_dependencies (
    parent_id BIGINT NOT NULL,
    child_id BIGINT NOT NULL,
    PRIMARY KEY (parent_id, child_id),
    INDEX leased_dependencies_child (child_id),
    CONSTRAINT leased_dependencies_parent FOREIGN KEY (parent_id) REFERENCES leased_jobs (id) ON DELETE CASCADE,
    CONSTRAINT leased_dependencies_child FOREIGN KEY (child_id) REFERENCES leased_jobs (id) ON DELETE CASCADE
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
