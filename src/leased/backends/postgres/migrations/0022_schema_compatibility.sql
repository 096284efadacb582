-- Which older code runs on this schema, so that a rolling deploy (migrate, then restart the
-- processes one by one) never stops an older process that could run on it.
--
-- A row per migration from this one on: the oldest schema version whose code (that release's
-- workers, producers and dashboards) runs correctly once the migration is applied. Code that finds
-- the schema newer than itself reads the rows of the versions it does not know, and runs on unless
-- one of them needs newer code; then it refuses, naming that version. Each later migration adds its
-- own row in its own script (tests/test_schema.py checks that it does). Releases before this one
-- do not read the table: they refuse any schema newer than themselves.
CREATE TABLE leased_schema_compatibility (
    version integer PRIMARY KEY,
    oldest_code_version integer NOT NULL
);
-- This migration only adds the table: code written for 0021 runs on it.
INSERT INTO leased_schema_compatibility (version, oldest_code_version) VALUES (22, 21);
