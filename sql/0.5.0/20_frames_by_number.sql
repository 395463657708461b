/*
 * Frame-by-frame dependencies into an unchunked layer are found by number
 * (sql/src/depends.sql): a depend row of kind 'frames' per layer waited
 * for, frame.frees_by_number on the prerequisite tasks, and no edge rows.
 * Jobs submitted before this step keep their edges in frame_depend, which
 * every path still meets, and their tasks' frees_by_number is false.
 */
ALTER TABLE frameq.frame ADD COLUMN frees_by_number bool NOT NULL DEFAULT false;
ALTER TABLE frameq.depend DROP CONSTRAINT depend_kind_check,
	ADD CONSTRAINT depend_kind_check CHECK (kind IN ('job', 'layer', 'frames'));
CREATE INDEX depend_on_frames ON frameq.depend (on_layer) WHERE kind = 'frames' AND NOT satisfied;
