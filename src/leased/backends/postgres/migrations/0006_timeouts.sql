-- Time limits. Each job carries its own (NULL: none), so a worker applies what the enqueuer chose.
ALTER TABLE leased_jobs ADD COLUMN timeout_seconds double precision;

-- Workers announce how many handler threads still run past their job's limit, each holding a slot.
ALTER TABLE leased_workers ADD COLUMN stuck_handlers integer NOT NULL DEFAULT 0;

-- A new outcome, 'timeout'. NOT VALID skips re-checking the existing rows, which the old, narrower
-- check already admitted: on a large history the migration stays instant. New rows are checked.
ALTER TABLE leased_attempts
    DROP CONSTRAINT leased_attempts_outcome_check,
    ADD CONSTRAINT leased_attempts_outcome_check
        CHECK (outcome IN ('done', 'error', 'lease_lost', 'expired', 'cancelled', 'shutdown', 'timeout')) NOT VALID;
