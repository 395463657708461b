/*
 * PREPARE TRANSACTION of a transaction that made a frame waiting without
 * touching a proc (retry_frame of a finished frame) is refused with 0A000:
 * the layer's dispatch hint is lowered only when the transaction commits,
 * from a log kept in this session, which PREPARE would drop; COMMIT
 * PREPARED would then leave the frame waiting below its layer's hint,
 * where no reserve() looks (src/dispatch.c).  The same retry committed
 * normally is booked at once.
 *
 * Like 13_prepare_and_commit.sql this file is not wrapped in a
 * transaction (see there); its fixture is named t42 and deleted at the end.
 */
\set ON_ERROR_STOP 1
SELECT plan(9);

SELECT frameq.create_allocation('t42.pool') AS alloc \gset
SELECT frameq.create_show('t42show') AS show \gset
SELECT frameq.set_subscription('t42show', 't42.pool', 100, 100) \g /dev/null
SELECT frameq.register_host('t42-h1', 't42.pool', 8, 17179869184) AS tok \gset
SELECT id AS host FROM frameq.host WHERE name = 't42-h1' \gset
SELECT epoch FROM frameq.attach('t42-h1', :'tok', 'boot-1') \gset
SELECT frameq.submit($${"show": "t42show", "name": "prep",
	"layers": [{"name": "l", "command": "c", "range": "1-3"}]}$$) AS job \gset

-- frames 1 and 2 are booked and succeed; the layer's hint moves past them
SELECT proc AS p1 FROM frameq.reserve('t42-h1', :'tok', :epoch, 1) \gset
SELECT proc AS p2 FROM frameq.reserve('t42-h1', :'tok', :epoch, 1) \gset
SELECT frameq.complete('t42-h1', :'tok', :epoch, :p1, 0) \g /dev/null
SELECT frameq.complete('t42-h1', :'tok', :epoch, :p2, 0) \g /dev/null
SELECT id AS f1 FROM frameq.frame WHERE job = :job AND number = 1 \gset
SELECT is((SELECT state FROM frameq.frame WHERE id = :f1), 'succeeded', 'frame 1 has succeeded');

BEGIN;
SELECT frameq.retry_frame(:f1);
\set ON_ERROR_STOP 0
PREPARE TRANSACTION 't42_retry';
\set ON_ERROR_STOP 1
ROLLBACK;

SELECT is(:'LAST_ERROR_SQLSTATE'::text, '0A000', 'PREPARE TRANSACTION after retry_frame is refused with 0A000');
SELECT alike(:'LAST_ERROR_MESSAGE'::text, '%frameq%', 'the refusal is frameq''s own');
SELECT is((SELECT count(*)::int FROM pg_prepared_xacts WHERE gid = 't42_retry'), 0,
		  'no prepared transaction is left behind');
\set ON_ERROR_STOP 0
COMMIT PREPARED 't42_retry';
\set ON_ERROR_STOP 1
SELECT is((SELECT state FROM frameq.frame WHERE id = :f1), 'succeeded', 'frame 1 is still succeeded');

-- the same retry, committed normally, is booked next
SELECT frameq.retry_frame(:f1) \g /dev/null
SELECT is((SELECT state FROM frameq.frame WHERE id = :f1), 'waiting', 'a committed retry makes frame 1 waiting');
SELECT is(array_agg(frame_number ORDER BY frame_number), ARRAY[1, 3],
		  'and the next reserve books frame 1 (and 3)')
  FROM frameq.reserve('t42-h1', :'tok', :epoch, 4);
SELECT is_empty('SELECT * FROM frameq.check()', 'check() finds nothing wrong');

-- a transaction without frameq's work still prepares
BEGIN;
UPDATE frameq.job SET priority = 3 WHERE id = :job;
PREPARE TRANSACTION 't42_plain';
COMMIT PREPARED 't42_plain';
SELECT is((SELECT priority FROM frameq.job WHERE id = :job), 3, 'a plain transaction is still prepared and committed');

SELECT * FROM finish();

-- --------------------------------------------------------------- cleanup
SELECT frameq.confirm_host_dead('t42-h1') \g /dev/null
DELETE FROM frameq.proc WHERE job = :job;
DELETE FROM frameq.run WHERE job = :job;
DELETE FROM frameq.frame WHERE job = :job;
DELETE FROM frameq.layer WHERE job = :job;
DELETE FROM frameq.job WHERE id = :job;
DELETE FROM frameq.host WHERE id = :host;
DELETE FROM frameq.subscription WHERE show = :show;
DELETE FROM frameq.show WHERE id = :show;
DELETE FROM frameq.allocation WHERE id = :alloc;
