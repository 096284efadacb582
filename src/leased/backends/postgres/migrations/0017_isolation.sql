-- Process isolation chosen per call (Task.using(isolation=...)): 'thread' or 'process' on the
-- job's row, NULL for the task's own. And what a worker's children are doing (engine/children.py),
-- as JSON text the worker writes with each beat of its row ({"alive", "started", "recycled",
-- "crashes": {how: count}, "rss_bytes"}); NULL for a worker that has started none.
ALTER TABLE leased_jobs ADD COLUMN isolation text;
ALTER TABLE leased_workers ADD COLUMN children text;
