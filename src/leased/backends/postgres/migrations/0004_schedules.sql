-- Periodic jobs: one row per schedule (its last handled tick and what became of it), and one row
-- per recent tick, whose primary key is what makes exactly one job per tick however many workers
-- run the schedule.
CREATE TABLE leased_schedules (
    name text PRIMARY KEY,
    expression text NOT NULL,  -- the cron expression, or "every 300s"
    timezone text NOT NULL,
    last_tick_at timestamptz,  -- NULL until a worker first sees the schedule
    last_job_id bigint,
    skipped_ticks bigint NOT NULL DEFAULT 0,  -- not run: the previous run was still pending or running
    last_skipped_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE leased_schedule_ticks (
    schedule_name text NOT NULL,
    tick_at timestamptz NOT NULL,
    job_id bigint,  -- NULL: skipped
    PRIMARY KEY (schedule_name, tick_at)
);
