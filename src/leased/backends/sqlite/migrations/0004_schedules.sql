-- Periodic jobs: one row per schedule (its last handled tick and what became of it), and one row
-- per recent tick, whose primary key is what makes exactly one job per tick however many workers
-- run the schedule. Times are epoch seconds, as everywhere in this schema.
CREATE TABLE leased_schedules (
    name TEXT PRIMARY KEY,
    expression TEXT NOT NULL,  -- the cron expression, or "every 300s"
    timezone TEXT NOT NULL,
    last_tick_at REAL,  -- NULL until a worker first sees the schedule
    last_job_id INTEGER,
    skipped_ticks INTEGER NOT NULL DEFAULT 0,  -- not run: the previous run was still pending or running
    last_skipped_at REAL,
    updated_at REAL NOT NULL
);

CREATE TABLE leased_schedule_ticks (
    schedule_name TEXT NOT NULL,
    tick_at REAL NOT NULL,
    job_id INTEGER,  -- NULL: skipped
    PRIMARY KEY (schedule_name, tick_at)
);
