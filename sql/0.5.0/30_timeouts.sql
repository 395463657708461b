/*
 * When renders misbehave (timeouts): a job's and a layer's timeout and
 * timeout_no_output, a layer's progress_pattern (also handed out in the
 * booking), each proc's deadline with the index the worker reads it by,
 * the cause of a kill order frameq gave a misbehaving render, and what
 * the agent last reported of the render; the run reasons timeout, stalled
 * and oom.  The kill orders get an index of their own, so that a worker
 * round reads them without reading every running proc.  Procs booked before this step have no deadline.
 */
ALTER TABLE frameq.job ADD COLUMN timeout int CHECK (timeout > 0),
	ADD COLUMN timeout_no_output int CHECK (timeout_no_output > 0);
ALTER TABLE frameq.layer ADD COLUMN timeout int CHECK (timeout > 0),
	ADD COLUMN timeout_no_output int CHECK (timeout_no_output > 0),
	ADD COLUMN progress_pattern text;
ALTER TABLE frameq.proc ADD COLUMN timeout_at timestamptz,
	ADD COLUMN kill_cause text,
	ADD COLUMN last_line text CHECK (pg_catalog.length(last_line) <= 200),
	ADD COLUMN progress real CHECK (progress BETWEEN 0 AND 100),
	ADD COLUMN last_output_at timestamptz,
	ADD CONSTRAINT proc_kill_cause CHECK (kill_cause IS NULL
										 OR (kill_cause IN ('timeout', 'stalled') AND state = 'killing'));
CREATE INDEX proc_kill_orders ON frameq.proc (id) WHERE state = 'killing';
CREATE INDEX proc_timeout_due ON frameq.proc (timeout_at)
	WHERE state = 'running' AND timeout_at IS NOT NULL;
ALTER TABLE frameq.run DROP CONSTRAINT run_reason_check,
	ADD CONSTRAINT run_reason_check CHECK (reason IN ('completed', 'killed', 'timeout', 'stalled',
													  'oom', 'host_lost', 'host_rebooted',
													  'lost_by_agent', 'operator'));
ALTER TYPE frameq.booking ADD ATTRIBUTE progress_pattern text;
