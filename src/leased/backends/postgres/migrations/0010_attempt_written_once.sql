-- An attempt's record is written once, complete, when the attempt ends (finish, release, cancel,
-- or the reclaim of its expired lease); until then the job row holds what the record will say:
-- the attempt's number, its worker (lease_owner) and, from here on, when it started. Readers
-- show a running job's attempt from these (leased.jobs.with_running_attempt). A record an older
-- version opened at claim is closed in place by the same writes. A nullable column without a
-- default: no table rewrite.
ALTER TABLE leased_jobs ADD COLUMN attempt_started_at timestamptz;
