-- Fairness by key (docs/howto/fairness.md): a job's fairness key, and the weights an operator
-- sets per (queue, key) and per queue. Only the column and the weights for now: this database's
-- claim does not yet share by key (its capabilities say fair_claims=False, so an enqueue with a
-- fairness key is refused); SQLite's and MariaDB's 0029 have the triggers and claim. Code from
-- version 21 on runs on this schema (it leaves the column null).
ALTER TABLE leased_jobs ADD COLUMN fairness_key text;
CREATE TABLE leased_fairness_weights (
    queue_name text NOT NULL,
    fairness_key text NOT NULL,
    weight double precision NOT NULL CHECK (weight > 0),
    PRIMARY KEY (queue_name, fairness_key)
);
CREATE TABLE leased_fairness_defaults (
    queue_name text PRIMARY KEY,
    weight double precision NOT NULL CHECK (weight > 0)
);
-- The waiting keys and their passes, which SQLite's and MariaDB's claims keep; empty here for now.
CREATE TABLE leased_fair_keys (
    queue_name text NOT NULL,
    fairness_key text NOT NULL,
    pass double precision NOT NULL,
    waiting integer NOT NULL,
    PRIMARY KEY (queue_name, fairness_key)
);
CREATE INDEX leased_fair_keys_pass ON leased_fair_keys (queue_name, pass);
INSERT INTO leased_schema_compatibility (version, oldest_code_version) VALUES (29, 21);
