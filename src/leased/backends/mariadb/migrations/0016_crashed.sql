-- A new outcome, 'crashed': a process-isolated handler's child died mid-job (engine/children.py).
ALTER TABLE leased_attempts DROP CONSTRAINT leased_attempts_outcome,
    ADD CONSTRAINT leased_attempts_outcome CHECK (outcome IN ('done', 'error', 'lease_lost', 'expired', 'cancelled',
                                                              'shutdown', 'timeout', 'crashed'));
