-- The clock seam (see leased/clock.py): MariaDB's leased_now() is written out in each query as the
-- server's clock plus the session's @leased_clock_offset (a stored function would be evaluated
-- row by row and bound no index range), so there is nothing to create. The number is kept level
-- with PostgreSQL's 0007.
SELECT 1;
