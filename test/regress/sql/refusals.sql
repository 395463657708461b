--
-- refusals: bad input to the API is refused with the SQLSTATE that
-- doc/reference.md ("Error codes") gives for it, and changes nothing.
-- One row per case: the case, the SQLSTATE and the message.
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS frameq CASCADE;
CREATE EXTENSION frameq;
RESET client_min_messages;

SELECT frameq.create_allocation('rf.pool') > 0 AS allocation_created;
SELECT frameq.create_show('rfshow') > 0 AS show_created;
SELECT frameq.set_subscription('rfshow', 'rf.pool', 4, 4);
CREATE TEMP TABLE agent AS
	SELECT 'rf-h1'::text AS host,
	       frameq.register_host('rf-h1', 'rf.pool', 4, 8589934592) AS token,
	       NULL::bigint AS epoch;
UPDATE agent SET epoch = (SELECT a.epoch FROM frameq.attach(agent.host, agent.token, 'boot-1') a);
SELECT frameq.submit('{"show": "rfshow", "name": "rfjob",
	"layers": [{"name": "l", "command": "c #FRAME#", "range": "1-2"}]}') > 0 AS submitted;

-- Runs one statement and returns its SQLSTATE and message, or 'ok'.  The
-- statement's effects are rolled back with the error.  {host}, {token} and
-- {epoch} in it are replaced by the agent's, so that no secret is written
-- in a statement.
CREATE FUNCTION pg_temp.refusal(call text) RETURNS TABLE (sqlstate text, message text)
LANGUAGE plpgsql AS $$
DECLARE
	a record;
BEGIN
	SELECT * INTO a FROM agent;
	EXECUTE replace(replace(replace(call, '{host}', quote_literal(a.host)),
	                        '{token}', quote_literal(a.token)),
	                '{epoch}', a.epoch::text);
	RETURN QUERY SELECT 'ok'::text, NULL::text;
EXCEPTION WHEN OTHERS THEN
	RETURN QUERY SELECT SQLSTATE::text, SQLERRM;
END
$$;

CREATE TEMP TABLE before AS
	SELECT (SELECT count(*) FROM frameq.allocation) AS allocations,
	       (SELECT count(*) FROM frameq.show) AS shows,
	       (SELECT count(*) FROM frameq.host) AS hosts,
	       (SELECT count(*) FROM frameq.job) AS jobs,
	       (SELECT count(*) FROM frameq.frame) AS frames,
	       (SELECT count(*) FROM frameq.proc) AS procs,
	       (SELECT max(epoch) FROM frameq.host) AS epoch;

SELECT c.n, c.what, r.sqlstate, r.message
  FROM (VALUES
	(1, 'NULL name', $$SELECT frameq.create_allocation(NULL)$$),
	(2, 'name with a space', $$SELECT frameq.create_allocation('rf pool')$$),
	(3, 'allocation that exists', $$SELECT frameq.create_allocation('rf.pool')$$),
	(4, 'name of 101 characters', format($$SELECT frameq.create_show(%L)$$, repeat('s', 101))),
	(5, 'subscription of an unknown show', $$SELECT frameq.set_subscription('nosuch', 'rf.pool', 1, 1)$$),
	(6, 'negative subscription size', $$SELECT frameq.set_subscription('rfshow', 'rf.pool', -1, 1)$$),
	(7, 'host with negative cores', $$SELECT frameq.register_host('rf-h2', 'rf.pool', -1, 1)$$),
	(8, 'cores with three decimals', $$SELECT frameq.register_host('rf-h2', 'rf.pool', 1.125, 1)$$),
	(9, 'submit without a show', $$SELECT frameq.submit('{"name": "j", "layers": []}')$$),
	(10, 'submit to an unknown show', $$SELECT frameq.submit('{"show": "nosuch", "name": "j",
		"layers": [{"name": "l", "command": "c", "range": "1"}]}')$$),
	(11, 'submit with a backwards range', $$SELECT frameq.submit('{"show": "rfshow", "name": "j",
		"layers": [{"name": "l", "command": "c", "range": "3-1"}]}')$$),
	(12, 'submit with an unknown key', $$SELECT frameq.submit('{"show": "rfshow", "name": "j", "colour": "red",
		"layers": [{"name": "l", "command": "c", "range": "1"}]}')$$),
	(13, 'attach with a wrong token', $$SELECT frameq.attach({host}, 'not-the-token', 'boot-2')$$),
	(14, 'reserve with a NULL epoch', $$SELECT frameq.reserve({host}, {token}, NULL)$$),
	(15, 'reserve with a stale epoch', $$SELECT frameq.reserve({host}, {token}, {epoch} - 1)$$),
	(16, 'reserve of 0 frames', $$SELECT frameq.reserve({host}, {token}, {epoch}, 0)$$),
	(17, 'reserve of 1001 frames', $$SELECT frameq.reserve({host}, {token}, {epoch}, 1001)$$),
	(18, 'complete with a NULL proc', $$SELECT frameq.complete({host}, {token}, {epoch}, NULL, 0)$$),
	(19, 'complete with a negative signal', $$SELECT frameq.complete({host}, {token}, {epoch}, 1, 0, -1)$$),
	(20, 'unknown host state', $$SELECT frameq.set_host_state({host}, 'sleeping')$$),
	(21, 'kill an unknown job', $$SELECT frameq.kill_job(999999, 'why')$$),
	(22, 'TRUNCATE frameq.proc', $$TRUNCATE frameq.proc$$),
	(23, 'the agent''s own calls still work', $$SELECT frameq.heartbeat({host}, {token}, {epoch}, '{}')$$))
	AS c(n, what, call),
	LATERAL pg_temp.refusal(c.call) r
 ORDER BY c.n;

-- nothing changed, and every invariant holds
SELECT b.* = a.* AS unchanged
  FROM before b,
       (SELECT (SELECT count(*) FROM frameq.allocation) AS allocations,
               (SELECT count(*) FROM frameq.show) AS shows,
               (SELECT count(*) FROM frameq.host) AS hosts,
               (SELECT count(*) FROM frameq.job) AS jobs,
               (SELECT count(*) FROM frameq.frame) AS frames,
               (SELECT count(*) FROM frameq.proc) AS procs,
               (SELECT max(epoch) FROM frameq.host) AS epoch) a;
SELECT * FROM frameq.check();

DROP TABLE agent, before;
SET client_min_messages = warning;
DROP EXTENSION frameq CASCADE;
CREATE EXTENSION frameq;
RESET client_min_messages;
