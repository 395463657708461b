/*
 * Requeue exit codes and retry delays (doc/reference.md, submit's fields
 * requeue_exit_codes, requeue_delay, max_requeues, retry_delay): the
 * fields of jobs and layers (NULL everywhere: every job and layer submitted
 * before this step has the defaults), a task's requeue count, and its
 * delay.  A delayed task leaves the index that reserve() probes
 * (frame_waiting) for one of its own that the background worker probes
 * (frame_delayed).  Tasks waiting before this step are not delayed.
 */
ALTER TABLE frameq.job
	ADD COLUMN requeue_exit_codes int[] CHECK (pg_catalog.cardinality(requeue_exit_codes) OPERATOR(pg_catalog.<=) 32
											   AND 1 OPERATOR(pg_catalog.<=) ALL (requeue_exit_codes)
											   AND 255 OPERATOR(pg_catalog.>=) ALL (requeue_exit_codes)),
	ADD COLUMN requeue_delay int CHECK (requeue_delay >= 0),
	ADD COLUMN max_requeues int CHECK (max_requeues BETWEEN 0 AND 1000),
	ADD COLUMN retry_delay int CHECK (retry_delay >= 0);
ALTER TABLE frameq.layer
	ADD COLUMN requeue_exit_codes int[] CHECK (pg_catalog.cardinality(requeue_exit_codes) OPERATOR(pg_catalog.<=) 32
											   AND 1 OPERATOR(pg_catalog.<=) ALL (requeue_exit_codes)
											   AND 255 OPERATOR(pg_catalog.>=) ALL (requeue_exit_codes)),
	ADD COLUMN requeue_delay int CHECK (requeue_delay >= 0),
	ADD COLUMN max_requeues int CHECK (max_requeues BETWEEN 0 AND 1000),
	ADD COLUMN retry_delay int CHECK (retry_delay >= 0);
ALTER TABLE frameq.frame
	ADD COLUMN requeues int NOT NULL DEFAULT 0 CHECK (requeues >= 0),
	ADD COLUMN not_before timestamptz CHECK (not_before IS NULL OR state IN ('waiting', 'depend'));
DROP INDEX frameq.frame_waiting;
CREATE INDEX frame_waiting ON frameq.frame (layer, number)
	WHERE state = 'waiting' AND not_before IS NULL;
CREATE INDEX frame_delayed ON frameq.frame (not_before)
	WHERE state = 'waiting' AND not_before IS NOT NULL;
