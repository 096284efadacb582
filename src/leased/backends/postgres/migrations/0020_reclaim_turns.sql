-- The workers' periodic reclaims take turns: at most one in a given spacing across every worker of
-- the database, rather than one a second from each (engine/reclaimer.py).
--
-- Why: the reclaim reads every job claimed since the oldest open transaction began (their dead
-- entries in leased_jobs_leases), so while a transaction elsewhere holds the vacuum horizon back,
-- each reclaim costs more by the minute, and a fleet of N workers paid it N times a second to
-- return the same jobs. Recovery is as before: the lease, plus about a second.
--
-- When the last turn began, in milliseconds of leased_now(): a sequence, not a row, so that a turn
-- a second leaves no dead row version behind for the next turn to step over while the horizon is
-- held. setval is not undone by a rollback: a turn whose reclaim failed is spent, and the next
-- one comes a spacing later.
CREATE SEQUENCE leased_reclaim_turn_at MINVALUE 0 START 0;

-- Whether this reclaim takes the turn: none began less than `spacing` seconds ago, and none is
-- under way (the try-lock, held until this transaction ends). A turn recorded in the future (the
-- database's clock went back: a failover, the clock seam) counts as long past. NULL spacing: a
-- reclaim that does not take turns (run_until_empty's, the steps' second pass).
CREATE OR REPLACE FUNCTION leased_reclaim_turn(spacing double precision) RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    now_ms bigint := (extract(epoch FROM leased_now()) * 1000)::bigint;
    last_ms bigint;
BEGIN
    IF spacing IS NULL THEN
        RETURN true;
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtext('leased.reclaim.' || current_schema())) THEN
        RETURN false;
    END IF;
    last_ms := (SELECT last_value FROM leased_reclaim_turn_at);
    IF last_ms > now_ms - (spacing * 1000)::bigint AND last_ms <= now_ms THEN
        RETURN false;
    END IF;
    PERFORM setval('leased_reclaim_turn_at', now_ms);
    RETURN true;
END
$$;
