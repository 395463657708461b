
/* ended jobs by when they ended: what prune() may remove */
CREATE INDEX job_ended ON frameq.job (finished_at) WHERE state IN ('finished', 'killed');

/* totals that outlive the rows they count (metrics): written by prune() and lease expiry */
CREATE TABLE frameq.tally (
	metric		text NOT NULL,
	label		text NOT NULL DEFAULT '',
	value		bigint NOT NULL CHECK (value >= 0),
	PRIMARY KEY (metric, label)
);
