-- A new outcome, 'crashed': a process-isolated handler's child died mid-job (engine/children.py).
-- NOT VALID skips re-checking the existing rows, which the old, narrower check already admitted.
ALTER TABLE leased_attempts
    DROP CONSTRAINT leased_attempts_outcome_check,
    ADD CONSTRAINT leased_attempts_outcome_check
        CHECK (outcome IN ('done', 'error', 'lease_lost', 'expired', 'cancelled', 'shutdown', 'timeout', 'crashed'))
        NOT VALID;
