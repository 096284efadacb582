-- Workflows (leased/workflows.py): a step is a job, with a row in leased_steps and one row in
-- leased_dependencies per parent. A step whose parents have not all ended is 'waiting': no claim
-- reads that status. The new CHECK is looser than the old, so it needs no scan (NOT VALID).
ALTER TABLE leased_jobs DROP CONSTRAINT leased_jobs_status_check;
ALTER TABLE leased_jobs ADD CONSTRAINT leased_jobs_status_check
    CHECK (status IN ('pending', 'running', 'done', 'failed', 'cancelled', 'waiting')) NOT VALID;

ALTER TABLE leased_jobs ADD COLUMN workflow_id bigint;  -- NULL: a job of no workflow
CREATE INDEX leased_jobs_workflow ON leased_jobs (workflow_id) WHERE workflow_id IS NOT NULL;
-- Waiting steps per queue, counted exactly as the due set is (count_active).
CREATE INDEX leased_jobs_waiting ON leased_jobs (queue_name) WHERE status = 'waiting';

CREATE TABLE leased_workflows (
    id bigserial PRIMARY KEY,
    name text NOT NULL,
    -- Held while the run is unfinished; an enqueue with the key of a finished run frees it first.
    idempotency_key text UNIQUE,
    created_at timestamptz NOT NULL
);
CREATE INDEX leased_workflows_name ON leased_workflows (name, id);

-- A step's place in its workflow. parents_left counts the parents not ended yet, parents_failed
-- those that ended failed or cancelled: the finish of the last parent decides, from them and
-- run_when, whether the step becomes pending or is cancelled, in the finish's own transaction.
CREATE TABLE leased_steps (
    job_id bigint PRIMARY KEY REFERENCES leased_jobs (id) ON DELETE CASCADE,
    workflow_id bigint NOT NULL,
    name text NOT NULL,
    run_when text NOT NULL CHECK (run_when IN ('succeeded', 'finished', 'failed')),
    parents_left integer NOT NULL DEFAULT 0,
    parents_failed integer NOT NULL DEFAULT 0,
    previous_id bigint,  -- a chain's step before this one, whose result becomes its first argument
    added_by bigint,  -- the running step that added it (fan-out at run time), or NULL
    cancelled_by_parents boolean NOT NULL DEFAULT false,  -- cancelled when its parents settled, not by a person
    UNIQUE (workflow_id, name)
);

CREATE TABLE leased_dependencies (
    parent_id bigint NOT NULL REFERENCES leased_jobs (id) ON DELETE CASCADE,
    child_id bigint NOT NULL REFERENCES leased_jobs (id) ON DELETE CASCADE,
    PRIMARY KEY (parent_id, child_id)
);
CREATE INDEX leased_dependencies_child ON leased_dependencies (child_id);
