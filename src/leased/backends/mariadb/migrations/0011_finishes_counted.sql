-- Finished jobs are counted per minute as they finish, in the transaction that finishes them (a
-- worker's finish, and the reclaim that fails a job whose last lease expired), so the dashboard's
-- last hour, its chart and /metrics read a few rows per minute instead of every job finished in
-- the window (seconds, at a million jobs an hour). Each worker counts into rows of its own
-- (worker_id), so no worker waits on another's count row (nor deadlocks on its gap); the readers
-- sum them. The pruner no longer counts what it deletes: that was counted as it finished. Carried
-- over under worker_id '': the counts of the jobs pruned so far and of the finished jobs still in
-- the table (one pass over them, now). The key is 3,068 bytes, within InnoDB's 3,072.
ALTER TABLE leased_throughput
    ADD COLUMN worker_id VARCHAR(255) NOT NULL DEFAULT '' AFTER task_name,
    DROP PRIMARY KEY,
    ADD PRIMARY KEY (minute, queue_name, task_name, worker_id);
INSERT INTO leased_throughput (minute, queue_name, task_name, worker_id, done, failed)
SELECT FLOOR(finished_at / 60) * 60, queue_name, task_name, '', SUM(status = 'done'), SUM(status = 'failed')
FROM leased_jobs WHERE status IN ('done', 'failed') AND finished_at IS NOT NULL
GROUP BY 1, 2, 3
ON DUPLICATE KEY UPDATE done = leased_throughput.done + VALUES(done), failed = leased_throughput.failed + VALUES(failed);
