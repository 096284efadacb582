-- PostgreSQL's 0008 drops the indexes over every row that status lists and counts used, for a
-- partial one over failed and cancelled jobs. MariaDB has no partial indexes, so its (status, id)
-- index stays what serves those lists; InnoDB writes a secondary index only when its columns
-- change, so it costs an entry at claim and at finish, not at every write. The number is kept
-- level with the others.
SELECT 1;
