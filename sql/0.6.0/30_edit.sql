
/*
 * Editing what was submitted (set_layer, add_frames): a layer can be
 * paused, and keeps the chunk it was submitted with.  A layer submitted
 * before 0.6.0 gets the most frame numbers any of its tasks holds (a
 * chunk larger than the whole range made one shorter task: then that).
 */
ALTER TABLE frameq.layer
	ADD COLUMN paused bool NOT NULL DEFAULT false,
	ADD COLUMN chunk int NOT NULL DEFAULT 1 CHECK (chunk BETWEEN 1 AND 100000);
UPDATE frameq.layer l SET chunk = c.n
  FROM (SELECT f.layer, max(pg_catalog.cardinality(f.numbers)) AS n
		  FROM frameq.frame f WHERE f.numbers IS NOT NULL GROUP BY f.layer) c
 WHERE c.layer = l.id;
