-- The W3C trace context (traceparent, tracestate) of the span that enqueued a job, as JSON, when
-- the enqueue was traced (leased.tracing): a worker runs the job's attempts in spans that continue
-- that trace. NULL for a job enqueued without a trace, and for every job older code writes: code
-- from version 21 on runs on this schema.
ALTER TABLE leased_jobs ADD COLUMN trace_context TEXT;
INSERT INTO leased_schema_compatibility (version, oldest_code_version) VALUES (24, 21);
