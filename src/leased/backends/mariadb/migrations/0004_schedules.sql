-- Periodic jobs: one row per schedule, and one row per recent tick, whose primary key makes
-- exactly one job per tick however many workers run the schedule.
CREATE TABLE leased_schedules (
    name VARCHAR(255) NOT NULL PRIMARY KEY,
    expression VARCHAR(255) NOT NULL,
    timezone VARCHAR(255) NOT NULL,
    last_tick_at DOUBLE,
    last_job_id BIGINT,
    skipped_ticks INT NOT NULL DEFAULT 0,
    last_skipped_at DOUBLE,
    updated_at DOUBLE NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE leased_schedule_ticks (
    schedule_name VARCHAR(255) NOT NULL,
    tick_at DOUBLE NOT NULL,
    job_id BIGINT,  -- NULL: skipped
    PRIMARY KEY (schedule_name, tick_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
