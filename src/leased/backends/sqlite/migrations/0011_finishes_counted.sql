-- Finished jobs are counted per minute as they finish, in the transaction that finishes them (a
-- worker's finish, and the reclaim that fails a job whose last lease expired), so the dashboard's
-- last hour, its chart and /metrics read a few rows per minute instead of every job finished in
-- the window (seven seconds at a million jobs an hour). Each worker counts into rows of its own
-- (worker_id), as on the other databases, where that keeps workers from waiting on one another's
-- count rows; the readers sum them. The pruner no longer counts what it deletes: that was counted
-- as it finished. Carried over under worker_id '': the counts of the jobs pruned so far and of the
-- finished jobs still in the table (one pass over them, now). SQLite changes a primary key by
-- rebuilding the table.
CREATE TABLE leased_throughput_counted (
    minute REAL NOT NULL,
    queue_name TEXT NOT NULL,
    task_name TEXT NOT NULL,
    worker_id TEXT NOT NULL DEFAULT '',
    done INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, queue_name, task_name, worker_id)
);
INSERT INTO leased_throughput_counted (minute, queue_name, task_name, worker_id, done, failed)
SELECT minute, queue_name, task_name, '', sum(done), sum(failed) FROM (
    SELECT minute, queue_name, task_name, done, failed FROM leased_throughput
    UNION ALL
    SELECT CAST(finished_at / 60 AS INTEGER) * 60, queue_name, task_name, status = 'done', status = 'failed'
    FROM leased_jobs WHERE status IN ('done', 'failed') AND finished_at IS NOT NULL
)
GROUP BY 1, 2, 3;
DROP TABLE leased_throughput;
ALTER TABLE leased_throughput_counted RENAME TO leased_throughput;
