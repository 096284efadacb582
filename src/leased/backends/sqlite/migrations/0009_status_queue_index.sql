-- MariaDB's 0009 turns its (queue_name, status) index into (status, queue_name), so that counting
-- one status by queue reads the index alone. Nothing to change here (SQLite's count_split is not changed here); the number is
-- kept level with the others.
SELECT 1;
