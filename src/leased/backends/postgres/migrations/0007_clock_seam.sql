-- The clock seam (see leased/clock.py): every query that decides time reads leased_now(), the
-- database's now() plus the session's leased.clock_offset, an interval a test may set (unset or
-- empty: zero). A STABLE SQL function of one expression, so the planner inlines it: claims keep
-- their plans and their index conditions.
CREATE OR REPLACE FUNCTION leased_now() RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT now() + coalesce(nullif(current_setting('leased.clock_offset', true), '')::interval, interval '0') $$;
