-- The clock seam (see leased/clock.py): SQLite's leased_now() is a Python function registered on
-- each connection, so there is nothing to create. The number is kept level with PostgreSQL's 0007.
SELECT 1;
