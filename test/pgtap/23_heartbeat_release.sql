/*
 * heartbeat(host, token, epoch, running): what one heartbeat may release
 * and what it must leave alone (doc/design.md, invariants 2 and 3).
 *
 *	- it renews the lease, and never revives an expired one (FQ002), nor
 *	  serves another epoch (FQ001): a refused heartbeat changes nothing,
 *	  not even the kill orders it would otherwise have confirmed;
 *	- a kill order the host no longer lists is confirmed dead: released
 *	  as 'killed' into its wanted state;
 *	- a running proc booked before the host's previous renewal that the
 *	  host does not list was lost by the agent: released as lost_by_agent,
 *	  back to waiting, without using a retry; one booked since is kept;
 *	- a listed proc that is not live for this host and epoch (unknown,
 *	  released, another host's, an earlier epoch's) is a zombie: it is in
 *	  the kill list of that same answer and changes nothing;
 *	- the kill list holds every kill order of the host.
 * Expired leases are simulated by moving lease_expires_at as superuser.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(51);

SELECT * FROM fqtest.farm('t23', cores => '{8,4}') \gset
SELECT current_setting('frameq.lease_ttl')::interval AS ttl \gset
SELECT frameq.submit($${"show": "t23show", "name": "t23-hb", "max_retries": 0,
	"layers": [{"name": "l", "command": "c", "range": "1-20"}]}$$) AS job \gset

SELECT proc AS p1, frame AS f1 FROM frameq.reserve('t23-h1', :'tok1', :epoch1, 1) \gset
SELECT proc AS p2, frame AS f2 FROM frameq.reserve('t23-h1', :'tok1', :epoch1, 1) \gset
SELECT proc AS q1, frame AS g1 FROM frameq.reserve('t23-h2', :'tok2', :epoch2, 1) \gset

/* everything but the hosts' lease and renewal times, which every good heartbeat moves */
CREATE FUNCTION fqtest.state_but_leases() RETURNS text LANGUAGE sql AS
$$ SELECT regexp_replace(fqtest.state(), ' lease [^\n]* idle ', ' idle ', 'gn') $$;

-- ------------------------------------------------------------- renewal

UPDATE frameq.host SET lease_expires_at = clock_timestamp() + interval '1 second',
	   last_renewal_at = clock_timestamp() - :'ttl'::interval + interval '1 second'
 WHERE id = :host1;
SELECT clock_timestamp() AS t0 \gset
SELECT * FROM frameq.heartbeat('t23-h1', :'tok1', :epoch1, ARRAY[:p1, :p2]::bigint[]) \gset hb_
SELECT clock_timestamp() AS t1 \gset
SELECT is(:'hb_kill'::bigint[], '{}'::bigint[], 'a heartbeat listing its two live procs has nothing to kill');
SELECT is(:'hb_lease_ttl'::interval, :'ttl'::interval, 'and returns the lease_ttl');
SELECT results_eq(format($$SELECT epoch, lease_expires_at BETWEEN %L::timestamptz + %L::interval AND %L::timestamptz + %L::interval,
								  last_renewal_at BETWEEN %L AND %L FROM frameq.host WHERE id = %s$$,
						 :'t0', :'ttl', :'t1', :'ttl', :'t0', :'t1', :host1),
				  format($$VALUES (%s::bigint, true, true)$$, :epoch1),
				  'it renews the lease to lease_ttl from now, records the renewal and keeps the epoch');

-- ------------------------------------------------------------- refusals change nothing

SELECT frameq.kill_frame(:f2, 'bad render') \g /dev/null
UPDATE frameq.host SET lease_expires_at = clock_timestamp() - interval '1 millisecond' WHERE id = :host1;
SELECT * FROM fqtest.refuses(format($$SELECT frameq.heartbeat('t23-h1', %L, %s, '{}')$$, :'tok1', :epoch1), 'FQ002',
	'lease of host "t23-h1" has expired',
	'a heartbeat after the lease ran out raises FQ002, and confirms neither the kill order nor the lost booking it does not list');
SELECT ok((SELECT lease_expires_at < clock_timestamp() FROM frameq.host WHERE id = :host1), 'the lease was not revived');
UPDATE frameq.host SET lease_expires_at = NULL WHERE id = :host1;
SELECT * FROM fqtest.refuses(format($$SELECT frameq.heartbeat('t23-h1', %L, %s, '{}')$$, :'tok1', :epoch1), 'FQ002', NULL,
	'a heartbeat on a host whose lease is gone raises FQ002 and changes nothing');
/* as if the last renewal had succeeded: the lease is current again */
UPDATE frameq.host SET lease_expires_at = clock_timestamp() + :'ttl'::interval WHERE id = :host1;
SELECT * FROM fqtest.refuses(format($$SELECT frameq.heartbeat('t23-h1', %L, %s, '{}')$$, :'tok1', :epoch1 + 1), 'FQ001',
	format('lease epoch %s of host "t23-h1" is not current', :epoch1 + 1),
	'a heartbeat naming a later epoch raises FQ001 and changes nothing');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.heartbeat('t23-h1', %L, %s, '{}')$$, :'tok1', :epoch1 - 1), 'FQ001', NULL,
	'a heartbeat naming an earlier epoch raises FQ001 and changes nothing');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.heartbeat('t23-h1', %L, %s, '{}')$$, :'tok2', :epoch1), '28P01', NULL,
	'a heartbeat with another host''s token raises 28P01 and changes nothing');
SELECT results_eq(format($$SELECT id, state FROM frameq.proc WHERE id IN (%s, %s) ORDER BY id$$, :p1, :p2),
				  format($$SELECT * FROM (VALUES (%s::bigint, 'running'), (%s, 'killing')) v ORDER BY 1$$, :p1, :p2),
				  'after the refusals both procs are as they were');

-- ------------------------------------------------------------- confirmations

SELECT is((SELECT kill FROM frameq.heartbeat('t23-h1', :'tok1', :epoch1, ARRAY[:p1, :p2]::bigint[])), ARRAY[:p2]::bigint[],
		  'a heartbeat still listing the kill order gets it back to kill');
SELECT is((SELECT state FROM frameq.frame WHERE id = :f2), 'running', 'and the frame stays running');
SELECT is((SELECT kill FROM frameq.heartbeat('t23-h1', :'tok1', :epoch1, ARRAY[:p1]::bigint[])), '{}'::bigint[],
		  'a heartbeat that no longer lists the kill order has nothing left to kill');
SELECT results_eq(format($$SELECT f.state, f.retries, f.attempts, r.reason, r.end_state FROM frameq.frame f JOIN frameq.run r ON r.frame = f.id WHERE f.id = %s$$, :f2),
				  $$VALUES ('dead', 0, 1, 'killed', 'dead')$$,
				  'it confirmed the kill: the frame is released as killed into its wanted state, dead');

/* p1 was booked before the previous renewal; p3 is booked now, after it */
SELECT proc AS p3, frame AS f3 FROM frameq.reserve('t23-h1', :'tok1', :epoch1, 1) \gset
SELECT is((SELECT kill FROM frameq.heartbeat('t23-h1', :'tok1', :epoch1, '{}')), '{}'::bigint[],
		  'a heartbeat listing nothing orders nothing killed');
SELECT results_eq(format($$SELECT f.state, f.retries, f.attempts, r.reason, r.end_state, r.exit_status FROM frameq.frame f JOIN frameq.run r ON r.frame = f.id WHERE f.id = %s$$, :f1),
				  $$VALUES ('waiting', 0, 1, 'lost_by_agent', 'waiting', NULL::int)$$,
				  'it releases the booking the host had seen and no longer runs as lost_by_agent: waiting, one attempt, no retry');
SELECT results_eq(format($$SELECT state, frameq.owns(id, frameq._run_secret(id)) FROM frameq.proc WHERE id = %s$$, :p3), $$VALUES ('running', true)$$,
				  'the booking made after the previous renewal, which the host may not have seen yet, is kept');
SELECT is((SELECT kill FROM frameq.heartbeat('t23-h1', :'tok1', :epoch1, '{}')), '{}'::bigint[],
		  'the next heartbeat that still does not list it orders nothing killed');
SELECT results_eq(format($$SELECT f.state, f.retries, r.reason FROM frameq.frame f JOIN frameq.run r ON r.frame = f.id WHERE f.id = %s$$, :f3),
				  $$VALUES ('waiting', 0, 'lost_by_agent')$$, 'and releases that booking as lost_by_agent');
SELECT is((SELECT idle_cc FROM frameq.host WHERE id = :host1), 800, 'h1 is entirely idle again');

-- ------------------------------------------------------------- zombies

SELECT proc AS p4, frame AS f4 FROM frameq.reserve('t23-h1', :'tok1', :epoch1, 1) \gset
SELECT frameq.heartbeat('t23-h1', :'tok1', :epoch1, ARRAY[:p4]::bigint[]) \g /dev/null

SELECT fqtest.state_but_leases() AS before \gset
SELECT is((SELECT kill FROM frameq.heartbeat('t23-h1', :'tok1', :epoch1, ARRAY[:p4, 4242]::bigint[])), '{4242}'::bigint[],
		  'a listed proc id that frameq never issued is ordered killed in the same answer');
SELECT is(fqtest.state_but_leases(), :'before', 'and changes nothing');

SELECT is((SELECT kill FROM frameq.heartbeat('t23-h1', :'tok1', :epoch1, ARRAY[:p4, :p2]::bigint[])), ARRAY[:p2]::bigint[],
		  'a listed proc that was released (killed) is ordered killed again');
SELECT is((SELECT kill FROM frameq.heartbeat('t23-h1', :'tok1', :epoch1, ARRAY[:p4, :p1]::bigint[])), ARRAY[:p1]::bigint[],
		  'a listed proc that was released as lost by the agent is ordered killed');
SELECT is(fqtest.state_but_leases(), :'before', 'neither report reopened a run record or touched the released frames');

SELECT is((SELECT kill FROM frameq.heartbeat('t23-h1', :'tok1', :epoch1, ARRAY[:p4, :q1]::bigint[])), ARRAY[:q1]::bigint[],
		  'another host''s live proc listed by h1 is ordered killed on h1');
SELECT is(fqtest.state_but_leases(), :'before', 'and nothing changes');
SELECT results_eq(format($$SELECT p.state, p.host, f.state, frameq.owns(p.id, frameq._run_secret(p.id)) FROM frameq.proc p JOIN frameq.frame f ON f.id = p.frame WHERE p.id = %s$$, :q1),
				  format($$VALUES ('running', %s, 'running', true)$$, :host2),
				  'in particular h2''s proc is still a live running proc of h2');
SELECT is((SELECT kill FROM frameq.heartbeat('t23-h2', :'tok2', :epoch2, ARRAY[:q1]::bigint[])), '{}'::bigint[],
		  'and h2''s own heartbeat listing it has nothing to kill');

/* an earlier epoch's proc: the agent restarts on the same boot */
SELECT epoch AS e_new, kill AS attach_kill FROM frameq.attach('t23-h1', :'tok1', 'boot-1') \gset
SELECT is(:'attach_kill'::bigint[], ARRAY[:p4]::bigint[], 'attach on the same boot returns the earlier epoch''s proc to kill');
SELECT proc AS p5, frame AS f5 FROM frameq.reserve('t23-h1', :'tok1', :e_new, 1) \gset
SELECT fqtest.state_but_leases() AS before \gset
SELECT is((SELECT kill FROM frameq.heartbeat('t23-h1', :'tok1', :e_new, ARRAY[:p4, :p5]::bigint[])), ARRAY[:p4]::bigint[],
		  'a heartbeat of the new epoch listing the earlier epoch''s proc gets it in its kill list');
SELECT is(fqtest.state_but_leases(), :'before', 'and changes nothing: the earlier epoch''s proc is still held as a kill order');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.heartbeat('t23-h1', %L, %s, ARRAY[%s]::bigint[])$$, :'tok1', :epoch1, :p4), 'FQ001', NULL,
	'the earlier epoch''s agent cannot heartbeat any more (FQ001)');

-- ------------------------------------------------------------- the kill list

SELECT proc AS p6, frame AS f6 FROM frameq.reserve('t23-h1', :'tok1', :e_new, 1) \gset
SELECT proc AS p7, frame AS f7 FROM frameq.reserve('t23-h1', :'tok1', :e_new, 1) \gset
SELECT frameq.retry_frame(:f5) \g /dev/null
SELECT frameq.eat_frame(:f6) \g /dev/null
SELECT is((SELECT kill FROM frameq.heartbeat('t23-h1', :'tok1', :e_new, ARRAY[:p4, :p5, :p6, :p7, 99]::bigint[])),
		  (SELECT array_agg(x ORDER BY x) FROM unnest(ARRAY[:p4, :p5, :p6, 99]::bigint[]) x),
		  'the kill list holds every kill order of the host (both epochs) and the zombie, in order, and not the live proc');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE host = :host1 AND state = 'killing'), 3, 'all three kill orders are still held');

SELECT frameq.set_host_state('t23-h1', 'down') \g /dev/null
SELECT is((SELECT kill FROM frameq.heartbeat('t23-h1', :'tok1', :e_new, ARRAY[:p4, :p5, :p6, :p7]::bigint[])),
		  (SELECT array_agg(x ORDER BY x) FROM unnest(ARRAY[:p4, :p5, :p6, :p7]::bigint[]) x),
		  'a host taken down still heartbeats, and hears that its last running proc is to be killed too');
SELECT ok((SELECT lease_expires_at > clock_timestamp() + :'ttl'::interval - interval '5 seconds' FROM frameq.host WHERE id = :host1),
		  'and its lease is still renewed, so it can go on confirming kills');
SELECT is((SELECT kill FROM frameq.heartbeat('t23-h1', :'tok1', :e_new, ARRAY[:p6]::bigint[])), ARRAY[:p6]::bigint[],
		  'a heartbeat listing one of the four confirms the other three');
SELECT results_eq(format($$SELECT f.id, f.state, f.retries, r.reason, r.end_state FROM frameq.frame f JOIN frameq.run r ON r.frame = f.id
						   WHERE r.proc IN (%s, %s, %s) ORDER BY f.id$$, :p4, :p5, :p7),
				  format($$VALUES (%s::bigint, 'waiting', 0, 'killed', 'waiting'), (%s, 'waiting', 0, 'killed', 'waiting'),
								  (%s, 'waiting', 0, 'killed', 'waiting')$$, :f4, :f5, :f7),
				  'each released as killed into waiting: re-attached, retried, host down; no retry used');
SELECT is((SELECT kill FROM frameq.heartbeat('t23-h1', :'tok1', :e_new, NULL)), '{}'::bigint[],
		  'a heartbeat with a null list is a heartbeat listing nothing');
SELECT results_eq(format($$SELECT f.state, r.reason FROM frameq.frame f JOIN frameq.run r ON r.frame = f.id WHERE r.proc = %s$$, :p6),
				  $$VALUES ('eaten', 'killed')$$, 'it confirms the last kill order: eaten');

SELECT results_eq(format($$SELECT reason, count(*)::int FROM frameq.run WHERE job = %s GROUP BY reason ORDER BY reason$$, :job),
				  $$VALUES ('killed', 5), ('lost_by_agent', 2), (NULL, 1)$$,
				  'seven runs of h1 ended: five kills confirmed and two bookings lost by the agent; h2''s run is open');
SELECT results_eq(format($$SELECT sum(retries)::int, sum(attempts)::int FROM frameq.frame WHERE job = %s$$, :job),
				  $$VALUES (0, 8)$$, 'no retry was used; eight bookings, eight attempts');
SELECT is((SELECT idle_cc FROM frameq.host WHERE id = :host1), 800, 'h1 is entirely idle again');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean at the end');

SELECT * FROM finish();
ROLLBACK;
