-- Finished jobs are counted per minute as they finish, in the statement that finishes them (a
-- worker's finish, and the reclaim that fails a job whose last lease expired), so the dashboard's
-- last hour, its chart and /metrics read a few rows per minute instead of every job finished in
-- the window (seconds, at a million jobs an hour). Each worker counts into rows of its own
-- (worker_id), so no worker waits on another's count row; the readers sum them. The pruner no
-- longer counts what it deletes: that was counted as it finished. Carried over under worker_id '':
-- the counts of the jobs pruned so far and of the finished jobs still in the table (one pass over
-- them, now).
ALTER TABLE leased_throughput ADD COLUMN worker_id text NOT NULL DEFAULT '';
ALTER TABLE leased_throughput DROP CONSTRAINT leased_throughput_pkey,
    ADD PRIMARY KEY (minute, queue_name, task_name, worker_id);
INSERT INTO leased_throughput AS t (minute, queue_name, task_name, worker_id, done, failed)
SELECT date_trunc('minute', finished_at), queue_name, task_name, '',
       count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'failed')
FROM leased_jobs WHERE status IN ('done', 'failed') AND finished_at IS NOT NULL
GROUP BY 1, 2, 3
ON CONFLICT (minute, queue_name, task_name, worker_id) DO UPDATE
SET done = t.done + excluded.done, failed = t.failed + excluded.failed;
