-- PostgreSQL's 0008 drops the indexes over every row that status lists and counts used, for a
-- partial one over failed and cancelled jobs. SQLite keeps them: it cannot use a partial index
-- for `status = ?` with the status bound as a parameter, as every list query binds it, and its
-- drain is bound by the worker's Python, not by index writes (docs/benchmarks.md). The number is
-- kept level with the others.
SELECT 1;
