-- Workers announce themselves, so the dashboard can show who is alive and what each runs.
CREATE TABLE leased_workers (
    id text PRIMARY KEY,
    host text NOT NULL,
    pid integer NOT NULL,
    concurrency integer NOT NULL,
    queues json,  -- NULL: every queue
    tasks json NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now()
);

-- Inspection at a million rows: filters keep keyset order, and "finished recently" reads a range.
CREATE INDEX leased_jobs_task ON leased_jobs (task_name, id);
CREATE INDEX leased_jobs_queue ON leased_jobs (queue_name, id);
CREATE INDEX leased_jobs_finished ON leased_jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX leased_jobs_key ON leased_jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;

-- Tasks tend to live in one queue: without this the planner multiplies the two filters'
-- selectivities and scans the whole table backwards for a task/queue pair that matches nothing.
CREATE STATISTICS leased_jobs_task_queue (dependencies, mcv) ON task_name, queue_name FROM leased_jobs;
