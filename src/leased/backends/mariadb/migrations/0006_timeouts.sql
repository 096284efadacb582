-- Time limits: each job carries its own (NULL: none).
ALTER TABLE leased_jobs ADD COLUMN timeout_seconds DOUBLE;
ALTER TABLE leased_workers ADD COLUMN stuck_handlers INT NOT NULL DEFAULT 0;
-- A new outcome, 'timeout'.
ALTER TABLE leased_attempts DROP CONSTRAINT leased_attempts_outcome,
    ADD CONSTRAINT leased_attempts_outcome CHECK (outcome IN ('done', 'error', 'lease_lost', 'expired', 'cancelled', 'shutdown', 'timeout'));
