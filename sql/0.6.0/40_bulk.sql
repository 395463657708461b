
/* a host may be drained: it books nothing new and lets its running tasks finish */
ALTER TABLE frameq.host DROP CONSTRAINT host_state_check,
	ADD CONSTRAINT host_state_check CHECK (state IN ('up', 'down', 'repair', 'drain'));
/* where a run's output is, as its agent reported it (report_log) */
ALTER TABLE frameq.run ADD COLUMN log text CHECK (pg_catalog.length(log) <= 1024);
