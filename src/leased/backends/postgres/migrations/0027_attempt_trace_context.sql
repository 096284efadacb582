-- The W3C trace context (JSON) of an attempt's own span, when its job was traced (leased.tracing):
-- written with the attempt's record by the finish that ends it, so that a workflow step's attempt
-- can link to its parents' attempts (a fan-in to every one). NULL for an untraced attempt, an end
-- other than a finish, and every end older code writes: code from version 21 on runs on it.
ALTER TABLE leased_attempts ADD COLUMN trace_context text;
INSERT INTO leased_schema_compatibility (version, oldest_code_version) VALUES (27, 21);
