-- Whether an attempt that its time limit ended left its handler's thread still running (stuck, and
-- holding a worker's slot until it returns): written with the attempt's record by the finish that
-- ends it, so that `leased why` reads the fact rather than the words of its error. NULL where not
-- recorded (ends older code writes, and ends other than a finish): code from version 21 on runs on it.
ALTER TABLE leased_attempts ADD COLUMN handler_outlived_limit BOOLEAN;
INSERT INTO leased_schema_compatibility (version, oldest_code_version) VALUES (25, 21);
