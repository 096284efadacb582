-- A job's row is written three times (enqueue, claim, finish), and neither update is HOT: status,
-- which both change, is in the due and lease indexes' predicates. So every index over every row
-- takes an entry three times per job. Status lists and counts read the small sets instead:
-- pending and running through leased_jobs_due and leased_jobs_leases, failed and cancelled
-- through the index below, done (most of the table) by walking the primary key newest first.
DROP INDEX leased_jobs_status;
DROP INDEX leased_jobs_queue_status;
CREATE INDEX leased_jobs_failed_or_cancelled ON leased_jobs (status, id) WHERE status IN ('failed', 'cancelled');

-- An attempt is inserted at claim and closed at finish, changing no indexed column: room on its
-- page lets that update be HOT (no new primary-key entry) while the page is still recent.
ALTER TABLE leased_attempts SET (fillfactor = 85);
