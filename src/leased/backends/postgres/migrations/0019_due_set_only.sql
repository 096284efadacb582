-- The due set (migration 0018) becomes the only index of pending jobs without a key: the two
-- partial indexes of leased_jobs that listed them go, and what read them (the counts, the oldest
-- due job, `leased why`'s jobs ahead, the limited claim, cancelling all pending jobs) reads
-- leased_due instead.
--
-- Why: every job wrote an entry to each of them and left it dead when claimed, 91 bytes a job of
-- index that outlived the job (bench/long_transaction.md), and while a transaction elsewhere
-- holds the vacuum horizon back, those dead entries are what the counts and the limited claim
-- stepped over. leased_due's dead entries go with its generations' truncates.
--
-- For the counts to read it, the due set must be exact at every commit: a due row for each
-- pending job without a key, and no other. So a writer that moves a job out of the set now waits
-- for a due row that a claim holds, rather than skip it and leave it behind. That cannot
-- deadlock: the claims and the rotation never wait for a row (SKIP LOCKED, NOWAIT), and the
-- writer holds the job, so no other writer holds its due row.
CREATE OR REPLACE FUNCTION leased_due_changed() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.status = 'pending' AND OLD.concurrency_key IS NULL THEN
        DELETE FROM leased_due WHERE priority = OLD.priority AND run_after = OLD.run_after AND id = OLD.id;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.status = 'pending' AND NEW.concurrency_key IS NULL THEN
        INSERT INTO leased_due (generation, id, priority, run_after, queue_name, task_name)
        VALUES (leased_due_generation_for(NEW.run_after), NEW.id, NEW.priority, NEW.run_after, NEW.queue_name,
                NEW.task_name);
    END IF;
    RETURN NULL;
END
$$;

-- Rows the skipping trigger of 0018 left behind, for jobs no longer pending (or moved since),
-- dropped; and, should a pending job lack its row, one added: from here the set is exact.
DELETE FROM leased_due AS due WHERE NOT EXISTS (
    SELECT FROM leased_jobs AS job
    WHERE job.id = due.id AND job.status = 'pending' AND job.concurrency_key IS NULL
      AND job.priority = due.priority AND job.run_after = due.run_after);
INSERT INTO leased_due (generation, id, priority, run_after, queue_name, task_name)
SELECT leased_due_generation_for(run_after), id, priority, run_after, queue_name, task_name
FROM leased_jobs AS job
WHERE status = 'pending' AND concurrency_key IS NULL
  AND NOT EXISTS (SELECT FROM leased_due AS due
                  WHERE due.priority = job.priority AND due.run_after = job.run_after AND due.id = job.id);

-- A limited queue's head, in claim order (claim_limited), and the counts per queue.
CREATE INDEX leased_due_queue ON leased_due (queue_name, priority DESC, run_after, id);

DROP INDEX leased_jobs_due;
DROP INDEX leased_jobs_queue_due;
