
/* a task's memory raised by a retry after an OOM, and why a dead task is dead */
ALTER TABLE frameq.frame
	ADD COLUMN memory bigint CHECK (memory > 0),
	ADD COLUMN dead_reason text CHECK (dead_reason IS NULL OR
									   (state = 'dead' AND pg_catalog.length(dead_reason) <= 200));
CREATE INDEX frame_raised ON frameq.frame (layer, memory, number)
	WHERE state = 'waiting' AND not_before IS NULL AND memory IS NOT NULL;
/* a raised task is booked only at its size: not from the layer's index */
DROP INDEX frameq.frame_waiting;
CREATE INDEX frame_waiting ON frameq.frame (layer, number)
	WHERE state = 'waiting' AND not_before IS NULL AND memory IS NULL;
