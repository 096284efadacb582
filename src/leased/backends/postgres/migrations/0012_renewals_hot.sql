-- A renewal rewrites only lease_expires_at, and while leased_jobs_leases indexed it, every renewal
-- was a non-HOT update: a dead row version and a new entry in the primary key, the task, queue and
-- lease indexes, for each running job every third of its lease. Indexed by id, the running set is
-- read as before (reclaim_expired reads it whole and checks each lease: it is at most the workers'
-- total concurrency, and id order is what the running lists want), and a renewal changes no
-- indexed column nor any index's predicate: HOT, with no index entry, when its page has room.
-- fillfactor 90 leaves that room on the pages new jobs are written to; a page's dead renewals
-- are pruned in place once no transaction can see them. Claims and finishes stay non-HOT: they
-- change status, which the partial indexes' predicates read.
DROP INDEX leased_jobs_leases;
CREATE INDEX leased_jobs_leases ON leased_jobs (id) WHERE status = 'running';
ALTER TABLE leased_jobs SET (fillfactor = 90);
