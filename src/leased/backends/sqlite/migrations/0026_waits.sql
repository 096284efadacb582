-- Jobs that wait (TaskContext.sleep and wait_for, Leased.signal; issue 46). A job whose handler
-- waits for a time or a signal is 'sleeping': its attempt ended (recorded with the new outcome
-- 'waited'), it holds no lease and no slot, and no claim reads it until it wakes. 'waiting' stays
-- what it was: a workflow's step whose parents have not all ended.
--
-- Both new values loosen a CHECK; SQLite changes one only by rebuilding the table or by editing the
-- stored schema text, which its documentation allows for a change no existing row can violate (see
-- 0013). The DDL after it bumps the schema cookie, so every open connection re-reads it.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema SET sql = replace(sql, '''waiting''))', '''waiting'', ''sleeping''))')
WHERE type = 'table' AND name = 'leased_jobs';
UPDATE sqlite_schema SET sql = replace(sql, '''crashed''))', '''crashed'', ''waited''))')
WHERE type = 'table' AND name = 'leased_attempts';
PRAGMA writable_schema = RESET;

-- What a sleeping job waits for: a time (signal_name NULL), or a signal until wake_at (NULL: no
-- timeout). Its end is found through leased_waits_wake_at, a range of the waits that are due: no
-- read of the other sleepers, nor of leased_jobs' hot indexes.
CREATE TABLE leased_waits (
    job_id INTEGER PRIMARY KEY REFERENCES leased_jobs (id) ON DELETE CASCADE,
    signal_name TEXT,
    since REAL NOT NULL,
    wake_at REAL
);
CREATE INDEX leased_waits_wake_at ON leased_waits (wake_at) WHERE wake_at IS NOT NULL;

-- A job's mailbox: each signal taken once, oldest first, by the attempt that took it (recorded with
-- the durable step that returned its payload, in the same transaction).
CREATE TABLE leased_signals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id INTEGER NOT NULL REFERENCES leased_jobs (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    payload TEXT,
    sent_at REAL NOT NULL,
    taken_by_attempt INTEGER,  -- NULL: not taken yet
    taken_at REAL
);
CREATE INDEX leased_signals_job ON leased_signals (job_id, name, id);

-- New tables, and looser checks: code from version 21 on runs on it, until a job sleeps (older code
-- reads no 'sleeping' status: see docs/upgrading.md).
INSERT INTO leased_schema_compatibility (version, oldest_code_version) VALUES (26, 21);
