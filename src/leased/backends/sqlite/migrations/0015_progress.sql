-- Progress (TaskContext.progress): how far an attempt got, as JSON text ({"done", "total", "note",
-- "attempt"}). The job's row holds its latest attempt's, written with a lease renewal and with the
-- attempt's end, so a retried job shows where its last attempt got to; each attempt's record
-- keeps its own.
ALTER TABLE leased_jobs ADD COLUMN progress TEXT;
ALTER TABLE leased_attempts ADD COLUMN progress TEXT;
