-- Workflows (leased/workflows.py): a step is a job, with a row in leased_steps and one row in
-- leased_dependencies per parent. A step whose parents have not all ended is 'waiting': no claim
-- reads that status. The new status loosens leased_jobs' CHECK; SQLite changes a CHECK only by
-- rebuilding the table (a copy of every job) or by editing the stored schema text, which its
-- documentation allows for a change that no existing row can violate (every row passes the old,
-- narrower check). The DDL after it bumps the schema cookie, so every open connection re-reads it.
-- It comes after the ALTER TABLE: this connection's parsed schema still has the old text, and an
-- ADD COLUMN on it would splice the new column in at the old text's end.
ALTER TABLE leased_jobs ADD COLUMN workflow_id INTEGER;  -- NULL: a job of no workflow
PRAGMA writable_schema = ON;
UPDATE sqlite_schema SET sql = replace(sql, '''cancelled''))', '''cancelled'', ''waiting''))')
WHERE type = 'table' AND name = 'leased_jobs';
PRAGMA writable_schema = RESET;  -- and this connection reloads the schema now
CREATE INDEX leased_jobs_workflow ON leased_jobs (workflow_id) WHERE workflow_id IS NOT NULL;
-- Waiting steps per queue, counted exactly as the due set is (count_active).
CREATE INDEX leased_jobs_waiting ON leased_jobs (queue_name) WHERE status = 'waiting';

CREATE TABLE leased_workflows (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    -- Held while the run is unfinished; an enqueue with the key of a finished run frees it first.
    idempotency_key TEXT UNIQUE,
    created_at REAL NOT NULL
);
CREATE INDEX leased_workflows_name ON leased_workflows (name, id);

-- A step's place in its workflow. parents_left counts the parents not ended yet, parents_failed
-- those that ended failed or cancelled: the finish of the last parent decides, from them and
-- run_when, whether the step becomes pending or is cancelled, in the finish's own transaction.
CREATE TABLE leased_steps (
    job_id INTEGER PRIMARY KEY REFERENCES leased_jobs (id) ON DELETE CASCADE,
    workflow_id INTEGER NOT NULL,
    name TEXT NOT NULL,
    run_when TEXT NOT NULL CHECK (run_when IN ('succeeded', 'finished', 'failed')),
    parents_left INTEGER NOT NULL DEFAULT 0,
    parents_failed INTEGER NOT NULL DEFAULT 0,
    previous_id INTEGER,  -- a chain's step before this one, whose result becomes its first argument
    added_by INTEGER,  -- the running step that added it (fan-out at run time), or NULL
    cancelled_by_parents INTEGER NOT NULL DEFAULT 0,  -- cancelled when its parents settled, not by a person
    UNIQUE (workflow_id, name)
);

CREATE TABLE leased_dependencies (
    parent_id INTEGER NOT NULL REFERENCES leased_jobs (id) ON DELETE CASCADE,
    child_id INTEGER NOT NULL REFERENCES leased_jobs (id) ON DELETE CASCADE,
    PRIMARY KEY (parent_id, child_id)
);
CREATE INDEX leased_dependencies_child ON leased_dependencies (child_id);
