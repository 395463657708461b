--
-- booking: one job's frames through the calls an agent makes (attach,
-- reserve, heartbeat, complete), with the frame, job, cap and host states
-- after each step.  Proc ids and run secrets are random and the host's
-- token is a secret: they stay in tables and never reach the output (nor
-- the text of a statement, which an error would quote).
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS frameq CASCADE;
CREATE EXTENSION frameq;
RESET client_min_messages;

-- reserve books nothing during the quarantine after a server start: the
-- server must run with frameq.quarantine = off, or have been up for a
-- lease period
SELECT frameq._in_quarantine() AS in_quarantine;

SELECT frameq.create_allocation('rg.pool') > 0 AS allocation_created;
SELECT frameq.create_show('rgshow') > 0 AS show_created;
SELECT frameq.set_subscription('rgshow', 'rg.pool', 8, 8);
SELECT frameq.create_limit('rglic', 1) > 0 AS limit_created;

-- the agent: its host, token and lease epoch
CREATE TEMP TABLE agent AS
	SELECT 'rg-h1'::text AS host,
	       frameq.register_host('rg-h1', 'rg.pool', 8, 17179869184) AS token,
	       NULL::bigint AS epoch;
UPDATE agent SET epoch = (SELECT a.epoch FROM frameq.attach(agent.host, agent.token, 'boot-1') a);
SELECT h.name, h.state, h.epoch = a.epoch AS this_epoch, h.idle_cores, h.running
  FROM frameq.hosts h JOIN agent a ON a.host = h.name;

-- reserve as the agent; the layer and frame number of each booking
CREATE FUNCTION pg_temp.book() RETURNS TABLE (layer text, frame_number int)
LANGUAGE sql AS $$
	SELECT l.name, b.frame_number
	  FROM agent a, frameq.reserve(a.host, a.token, a.epoch) b
	  JOIN frameq.layer l ON l.id = b.layer
	 ORDER BY 1, 2
$$;
-- complete() as the agent, for the running proc of a layer's frame:
-- report(layer name, frame number, exit status, exit signal)
CREATE FUNCTION pg_temp.report(text, int, int, int DEFAULT 0) RETURNS text
LANGUAGE sql AS $$
	SELECT frameq.complete(a.host, a.token, a.epoch, f.proc, $3, $4)
	  FROM agent a, frameq.frames f JOIN frameq.layer l ON l.id = f.layer
	 WHERE l.name = $1 AND f.frame_number = $2
$$;
CREATE FUNCTION pg_temp.frame_states()
RETURNS TABLE (layer text, frame_number int, state text, attempts int, retries int, has_proc bool)
LANGUAGE sql AS $$
	SELECT l.name, f.frame_number, f.state, f.attempts, f.retries, f.proc IS NOT NULL
	  FROM frameq.frames f JOIN frameq.layer l ON l.id = f.layer ORDER BY 1, 2
$$;

-- three 1-core render frames; two 2-core denoise frames under a licence
-- for one at a time; a frame that fails is retried once.  One host runs
-- everything, so its failures must not block it (host_failure_limit)
SELECT frameq.submit($${"show": "rgshow", "name": "shot010", "max_retries": 1,
	"host_failure_limit": 0, "layers": [
	{"name": "render", "command": "render -f #ZFRAME# #JOB#/#LAYER#", "range": "1-3",
	 "cores": 1, "memory": "1GB"},
	{"name": "denoise", "command": "denoise #FRAME#", "range": "1-2", "cores": 2,
	 "limits": ["rglic"]}]}$$) > 0 AS submitted;
SELECT name, state, total, waiting, running, succeeded, dead FROM frameq.job_progress;

-- the host books what the caps allow: every render frame, and the first
-- denoise frame (the licence's one)
CREATE TEMP TABLE booked AS
	SELECT b.*, l.name AS layer_name
	  FROM agent a, frameq.reserve(a.host, a.token, a.epoch) b
	  JOIN frameq.layer l ON l.id = b.layer;
SELECT layer_name, frame_number, command, cores, memory, gpus, env,
       run_secret ~ '^[0-9a-f]{32}$' AS has_secret
  FROM booked ORDER BY layer_name, frame_number;
SELECT kind, name, used_cores, max_cores, running, max_running FROM frameq.usage ORDER BY kind, name;
SELECT name, idle_cores, idle_memory, running FROM frameq.hosts;

-- a second reserve finds nothing more to book
SELECT * FROM pg_temp.book();

-- the heartbeat names the host's running procs: no kill order comes back
SELECT cardinality(h.kill) AS kill_orders
  FROM agent a, frameq.heartbeat(a.host, a.token, a.epoch, ARRAY(SELECT proc FROM booked)) h;

-- render 1 succeeds; the same report sent again is a duplicate
SELECT pg_temp.report('render', 1, 0);
SELECT frameq.complete(a.host, a.token, a.epoch, b.proc, 0)
  FROM agent a, booked b WHERE b.layer_name = 'render' AND b.frame_number = 1;
-- render 2 exits 1 and denoise 1 is ended by signal 9: each goes back to
-- waiting with one retry counted
SELECT pg_temp.report('render', 2, 1);
SELECT pg_temp.report('denoise', 1, 0, 9);
-- a report for a proc the host does not have is stale
SELECT frameq.complete(a.host, a.token, a.epoch, 12345, 0) FROM agent a;
SELECT * FROM pg_temp.frame_states();
SELECT name, state, total, waiting, running, succeeded, dead FROM frameq.job_progress;
SELECT kind, name, used_cores, running FROM frameq.usage ORDER BY kind, name;

-- the next reserve books the two retries; denoise 2 waits for the licence
SELECT * FROM pg_temp.book();

-- render 2 fails again, past its one retry: dead.  Render 3 and denoise
-- 1 succeed, and that frees the licence for denoise 2
SELECT pg_temp.report('render', 2, 1);
SELECT pg_temp.report('render', 3, 0);
SELECT pg_temp.report('denoise', 1, 0);
SELECT * FROM pg_temp.book();
SELECT pg_temp.report('denoise', 2, 0);

-- no frame is left to run: the job is finished, the host idle, the caps
-- back at zero, every run recorded, and every invariant holds
SELECT * FROM pg_temp.frame_states();
SELECT name, state, total, waiting, running, succeeded, dead FROM frameq.job_progress;
SELECT name, idle_cores, idle_memory, running FROM frameq.hosts;
SELECT kind, name, used_cores, running FROM frameq.usage ORDER BY kind, name;
SELECT count(*) AS procs FROM frameq.proc;
SELECT reason, end_state, exit_status, exit_signal, count(*) AS runs
  FROM frameq.runs GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4;
SELECT * FROM frameq.check();

DROP TABLE booked, agent;
SET client_min_messages = warning;
DROP EXTENSION frameq CASCADE;
CREATE EXTENSION frameq;
RESET client_min_messages;
