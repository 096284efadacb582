-- Poison jobs (issue 41): an attempt that ended because its process died (its worker's, or an
-- isolated handler's child) is a crash. `crashes` counts them on the job's row, where the reclaim
-- and the finish that record one can add to it in the same statement; `max_crashes` is the task's
-- limit, written at enqueue as max_attempts is. A job with crashes >= max_crashes has been ended
-- `failed` as a poison job (quarantined) instead of being retried up to max_attempts.
ALTER TABLE leased_jobs ADD COLUMN crashes integer NOT NULL DEFAULT 0;
ALTER TABLE leased_jobs ADD COLUMN max_crashes integer NOT NULL DEFAULT 2;
-- Code written for 0022 runs on it: its producers leave the default limit, and its workers count
-- no crash (a job they reclaim is retried up to max_attempts, as before).
INSERT INTO leased_schema_compatibility (version, oldest_code_version) VALUES (23, 22);
