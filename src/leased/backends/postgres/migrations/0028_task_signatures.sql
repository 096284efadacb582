-- Each task's signature as the worker that registers it sees it ({"send_receipt": "(order_id: int)"},
-- JSON): live workers that register one task name with different signatures are two apps on one
-- database taking each other's jobs, which the worker, `leased workers` and the dashboard warn of.
-- NULL in rows that older code writes (nothing to compare): code from version 21 on runs on it.
ALTER TABLE leased_workers ADD COLUMN task_signatures text;
INSERT INTO leased_schema_compatibility (version, oldest_code_version) VALUES (28, 21);
