-- SQLite's and MariaDB's 0009 turn their (queue_name, status) index into (status, queue_name), so
-- that counting one status by queue reads one status's range of the index alone. PostgreSQL
-- dropped that index in 0008 (its partial leased_jobs_failed_or_cancelled serves the count), so
-- there is nothing to change; the number is kept level with the others.
SELECT 1;
