/*
 * A job's limits on failure (src/limits.c): host_failure_limit blocks a
 * host that failed the job's tasks that many times, max_dead_frames pauses
 * the job once that many of its tasks are dead.  Jobs submitted before
 * this step have neither set, so they get the default host failure limit
 * and never pause themselves; none has a blocked host.
 */
ALTER TABLE frameq.job
	ADD COLUMN host_failure_limit int CHECK (host_failure_limit BETWEEN 0 AND 1000),
	ADD COLUMN max_dead_frames int CHECK (max_dead_frames BETWEEN 1 AND 1000000),
	ADD COLUMN paused_reason text,
	ADD COLUMN host_blocks bool NOT NULL DEFAULT false;

CREATE TABLE frameq.job_host_failure (
	job			bigint NOT NULL,
	host		int NOT NULL,
	failures	int NOT NULL CHECK (failures > 0),
	counted_since timestamptz NOT NULL,
	blocked_at	timestamptz,
	PRIMARY KEY (job, host)
);

CREATE TABLE frameq.job_limit_check (
	job			bigint PRIMARY KEY,
	died		bool NOT NULL DEFAULT false,
	since		timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
);

SELECT pg_catalog.pg_extension_config_dump('frameq.job_host_failure', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.job_limit_check', '');
