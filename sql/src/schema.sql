/*
 * frameq install script: the tables, their indexes and the booking type.
 *
 * The Makefile builds the install script of the default version
 * (sql/frameq--<default_version>.sql, frameq.control) from the topic files
 * in sql/src/, this one first; edit those, not the built script.  Each
 * object is defined once, as it is now: a change to one also ships as a
 * piece of the next upgrade step (sql/<next version>/), and
 * test/scripts/upgrade_from_0.1.0.sh proves that the upgraded catalog and
 * a fresh install's are the same.  doc/design.md, "How it is built".
 */

\echo Use "CREATE EXTENSION frameq" to load this file. \quit

/*
 * Refuse to install unless the library was loaded at server start: the ledger
 * lives in shared memory that only shared_preload_libraries can reserve.
 */
CREATE FUNCTION frameq._assert_preloaded() RETURNS void
	AS 'MODULE_PATHNAME', 'frameq_assert_preloaded'
	LANGUAGE C STRICT
	SET search_path = pg_catalog, pg_temp;
SELECT frameq._assert_preloaded();

/*
 * ---------------------------------------------------------------------
 * Tables.  Cores are stored as integer centicores (1 core = 100) in
 * columns named *_cc; the API speaks numeric cores.  The constraints below
 * are what the C code relies on: it never re-checks them.  No role but the
 * extension's owner has any privilege on a table: everything goes through
 * the functions (grants.sql).
 * ---------------------------------------------------------------------
 */

CREATE TABLE frameq.allocation (
	id			serial PRIMARY KEY,
	name		text NOT NULL UNIQUE CHECK (name <> ''),
	tag			text
);

CREATE TABLE frameq.show (
	id			serial PRIMARY KEY,
	name		text NOT NULL UNIQUE CHECK (name <> '')
);

/* size is the fair share, burst the hard cap, of a show's cores in an allocation */
CREATE TABLE frameq.subscription (
	show		int NOT NULL REFERENCES frameq.show,
	allocation	int NOT NULL REFERENCES frameq.allocation,
	size_cc		int NOT NULL CHECK (size_cc >= 0),
	burst_cc	int NOT NULL CHECK (burst_cc >= 0),
	changed_at	timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (show, allocation)
);

CREATE TABLE frameq.folder (
	id			serial PRIMARY KEY,
	show		int NOT NULL REFERENCES frameq.show,
	name		text NOT NULL CHECK (name <> ''),
	max_cc		int CHECK (max_cc >= 0),		/* NULL: no cap */
	max_gpus	int CHECK (max_gpus >= 0),		/* NULL: no cap */
	changed_at	timestamptz NOT NULL DEFAULT clock_timestamp(),
	UNIQUE (show, name),
	UNIQUE (id, show)			/* lets job reference (folder, show) */
);

CREATE TABLE frameq.limits (
	id			serial PRIMARY KEY,
	name		text NOT NULL UNIQUE CHECK (name <> ''),
	max_running int NOT NULL CHECK (max_running >= 0),
	changed_at	timestamptz NOT NULL DEFAULT clock_timestamp()
);

/*
 * A host is never deleted (runs refer to it); retiring it (retire_host())
 * takes its name and token out of the farm.  Names are unique among the
 * hosts in the farm only.
 */
CREATE TABLE frameq.host (
	id			serial PRIMARY KEY,
	name		text NOT NULL CHECK (name <> ''),
	allocation	int NOT NULL REFERENCES frameq.allocation,
	cores_cc	int NOT NULL CHECK (cores_cc > 0),
	memory		bigint NOT NULL CHECK (memory > 0),
	gpus		int NOT NULL CHECK (gpus >= 0),
	gpu_memory	bigint NOT NULL CHECK (gpu_memory >= 0),
	tags		text[] NOT NULL DEFAULT '{}',
	token_hash	bytea NOT NULL,
	/* drain: books nothing new, lets its running tasks finish (set_host_state) */
	state		text NOT NULL DEFAULT 'up' CHECK (state IN ('up', 'down', 'repair', 'drain')),
	/* who put it down (or drained it): an operator, or the loss of its lease (attach lifts that) */
	down_reason text CHECK (down_reason IN ('operator', 'lease_lost')),
	/* lease: epoch 0 means never attached */
	epoch		bigint NOT NULL DEFAULT 0 CHECK (epoch >= 0),
	boot_id		text,
	lease_expires_at timestamptz,
	last_renewal_at timestamptz,
	/* free capacity, moved only by the proc table's triggers */
	idle_cc		int NOT NULL,
	idle_memory bigint NOT NULL,
	idle_gpus	int NOT NULL,
	idle_gpu_memory bigint NOT NULL,
	registered_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	/* set when the host leaves the farm: its name and token stop working */
	retired_at	timestamptz,
	/*
	 * the lease_ttl its last attach or heartbeat handed out: the lease
	 * lasts that long whatever lease_ttl is set to since (NULL: granted
	 * before 0.6.0, read as the current lease_ttl)
	 */
	lease_granted interval,
	/* one constraint, not four: every booking re-checks it */
	CONSTRAINT host_idle_within_capacity CHECK (
		idle_cc BETWEEN 0 AND cores_cc AND idle_memory BETWEEN 0 AND memory AND
		idle_gpus BETWEEN 0 AND gpus AND idle_gpu_memory BETWEEN 0 AND gpu_memory)
);
CREATE UNIQUE INDEX host_name_in_farm ON frameq.host (name) WHERE retired_at IS NULL;

CREATE TABLE frameq.job (
	id			bigserial PRIMARY KEY,
	show		int NOT NULL REFERENCES frameq.show,
	folder		int,
	name		text NOT NULL CHECK (name <> ''),
	priority	int NOT NULL DEFAULT 0,
	max_retries int NOT NULL DEFAULT 3 CHECK (max_retries BETWEEN 0 AND 1000),
	auto_eat	bool NOT NULL DEFAULT false,
	max_cc		int CHECK (max_cc >= 0),		/* NULL: no cap */
	max_gpus	int CHECK (max_gpus >= 0),		/* NULL: no cap */
	state		text NOT NULL DEFAULT 'active'
				CHECK (state IN ('active', 'paused', 'finished', 'killed')),
	submitted_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	finished_at timestamptz,
	caps_changed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	FOREIGN KEY (folder, show) REFERENCES frameq.folder (id, show),
	/*
	 * Timeouts, in seconds (submit's durations, frameq._duration): the
	 * default of the job's layers, which follow the job's current value
	 * unless they have their own.  NULL: none.
	 */
	timeout		int CHECK (timeout > 0),
	timeout_no_output int CHECK (timeout_no_output > 0),
	/*
	 * Requeues and retry delays (submit's fields of these names): the
	 * defaults of the job's layers; NULL: frameq's default (src/frameq.h,
	 * FRAMEQ_DEFAULT_*).  Exit statuses, distinct, at most 32 of them.
	 */
	requeue_exit_codes int[] CHECK (pg_catalog.cardinality(requeue_exit_codes) OPERATOR(pg_catalog.<=) 32
									AND 1 OPERATOR(pg_catalog.<=) ALL (requeue_exit_codes)
									AND 255 OPERATOR(pg_catalog.>=) ALL (requeue_exit_codes)),
	requeue_delay int CHECK (requeue_delay >= 0),		/* seconds */
	max_requeues int CHECK (max_requeues BETWEEN 0 AND 1000),
	retry_delay int CHECK (retry_delay >= 0),			/* seconds */
	/*
	 * Job limits on failure (limits.c): failed runs on one host before the
	 * host gets no more of the job's tasks (NULL: the default,
	 * _default_host_failure_limit(); 0: never), and dead tasks at which
	 * the job pauses itself (NULL: never).
	 */
	host_failure_limit int CHECK (host_failure_limit BETWEEN 0 AND 1000),
	max_dead_frames int CHECK (max_dead_frames BETWEEN 1 AND 1000000),
	/* why the job paused itself (max_dead_frames); NULL for any other pause, cleared by set_job */
	paused_reason text,
	/*
	 * Some host is blocked for the job (job_host_failure.blocked_at), or
	 * was: reserve() looks its host up in job_host_failure only for a job
	 * with this set, so a job without blocks costs it nothing.  Written
	 * only by _job_blocks_mark, under the job's row lock.
	 */
	host_blocks bool NOT NULL DEFAULT false
);
/* booking walks a show's active jobs in policy order */
CREATE INDEX job_dispatch ON frameq.job (show, priority DESC, id)
	WHERE state = 'active';
/* a folder's jobs, for queueing them again (dispatch.sql, parking) */
CREATE INDEX job_folder ON frameq.job (folder) WHERE folder IS NOT NULL;
/* ended jobs by when they ended: what prune() may remove (worker.sql, pruning) */
CREATE INDEX job_ended ON frameq.job (finished_at) WHERE state IN ('finished', 'killed');

CREATE TABLE frameq.layer (
	id			bigserial PRIMARY KEY,
	job			bigint NOT NULL REFERENCES frameq.job,
	name		text NOT NULL CHECK (name <> ''),
	command		text NOT NULL CHECK (command <> ''),
	dispatch_order int NOT NULL DEFAULT 0,
	min_cc		int NOT NULL CHECK (min_cc > 0),
	max_cc		int NOT NULL,				/* cores_max; = min_cc unless threadable */
	threadable	bool NOT NULL DEFAULT false,
	memory		bigint NOT NULL DEFAULT 0 CHECK (memory >= 0),
	gpus		int NOT NULL DEFAULT 0 CHECK (gpus >= 0),
	gpu_memory	bigint NOT NULL DEFAULT 0 CHECK (gpu_memory >= 0),
	tags		text[] NOT NULL DEFAULT '{}',
	env			jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(env) = 'object'),
	UNIQUE (job, name),
	CHECK (max_cc >= min_cc),
	CHECK (threadable OR max_cc = min_cc),
	/* dependencies (depends.sql): unmet dependencies of the layer and of its job */
	deps_left	int NOT NULL DEFAULT 0 CHECK (deps_left >= 0),
	/*
	 * Timeouts in seconds; NULL: the job's current value.  The most a task
	 * may run (the worker's _time_out), and may go without writing output
	 * (heartbeat's report).
	 */
	timeout		int CHECK (timeout > 0),
	timeout_no_output int CHECK (timeout_no_output > 0),
	/* a regular expression whose first group is the render's percentage (the agent matches it) */
	progress_pattern text,
	/* requeues and retry delays, as in job; NULL: the job's current value */
	requeue_exit_codes int[] CHECK (pg_catalog.cardinality(requeue_exit_codes) OPERATOR(pg_catalog.<=) 32
									AND 1 OPERATOR(pg_catalog.<=) ALL (requeue_exit_codes)
									AND 255 OPERATOR(pg_catalog.>=) ALL (requeue_exit_codes)),
	requeue_delay int CHECK (requeue_delay >= 0),
	max_requeues int CHECK (max_requeues BETWEEN 0 AND 1000),
	retry_delay int CHECK (retry_delay >= 0),
	/*
	 * A paused layer books nothing (set_layer): _queue_layers writes no
	 * dispatch queue row for it, and reserve() takes a row of it for stale.
	 */
	paused		bool NOT NULL DEFAULT false,
	/* frame numbers per task, as submitted (add_frames cuts new tasks so) */
	chunk		int NOT NULL DEFAULT 1 CHECK (chunk BETWEEN 1 AND 100000)
);
CREATE INDEX layer_job ON frameq.layer (job, dispatch_order, id);

CREATE TABLE frameq.layer_limit (
	layer		bigint NOT NULL REFERENCES frameq.layer,
	limit_id	int NOT NULL REFERENCES frameq.limits,
	PRIMARY KEY (layer, limit_id)
);

/*
 * Dependencies (depends.sql): of a job on a job (kind 'job': job, on_job)
 * and of a layer on a layer of its job (kind 'layer': layer, on_layer).
 * Frame-by-frame dependencies of an unchunked layer (kind 'frames': layer,
 * on_layer) have no row per task: each task's prerequisite is the task of
 * on_layer that holds its number, found by number; satisfied here means
 * dropped (drop_depends: every such edge counts as met).  Those of a
 * chunked layer are edges between tasks, in frame_depend.  satisfied is
 * set once and never cleared.
 */
CREATE TABLE frameq.depend (
	id			bigserial PRIMARY KEY,
	kind		text NOT NULL CHECK (kind IN ('job', 'layer', 'frames')),
	job			bigint NOT NULL,
	layer		bigint,
	on_job		bigint NOT NULL,
	on_layer	bigint,
	satisfied	bool NOT NULL DEFAULT false,
	created_at	timestamptz NOT NULL DEFAULT clock_timestamp(),
	CHECK ((kind = 'job') = (layer IS NULL AND on_layer IS NULL))
);
CREATE INDEX depend_job ON frameq.depend (job, layer);
CREATE INDEX depend_on_job ON frameq.depend (on_job) WHERE kind = 'job' AND NOT satisfied;
CREATE INDEX depend_on_layer ON frameq.depend (on_layer) WHERE kind = 'layer' AND NOT satisfied;
CREATE INDEX depend_on_frames ON frameq.depend (on_layer) WHERE kind = 'frames' AND NOT satisfied;

/*
 * No foreign keys on job and layer: a key costs a query and a row lock per
 * inserted row, more than half of a submit's time (a submit writes up to
 * a million).  What they guarded is kept per statement (procs.sql, "What
 * frame's keys would guard"): each INSERT's rows are checked at once (the
 * layer exists and belongs to the job), job and layer are frozen, a layer
 * that frames name keeps its id and job and is not deleted (its job then
 * stays too, by layer's own key), and neither table is truncated while
 * frames exist.
 */
CREATE TABLE frameq.frame (
	id			bigserial PRIMARY KEY,
	job			bigint NOT NULL,
	layer		bigint NOT NULL,
	number		int NOT NULL,
	state		text NOT NULL DEFAULT 'waiting'
				CHECK (state IN ('waiting', 'depend', 'running', 'succeeded', 'dead', 'eaten')),
	retries		int NOT NULL DEFAULT 0 CHECK (retries >= 0),
	attempts	int NOT NULL DEFAULT 0 CHECK (attempts >= 0),
	version		bigint NOT NULL DEFAULT 0,	/* counts state changes */
	/*
	 * A task of a chunked layer (submit's "chunk") holds several frame
	 * numbers: all of them, in range order, the first being number.  NULL
	 * for a task of one number, as every frame of an unchunked layer is.
	 */
	numbers		int[] CHECK (pg_catalog.array_ndims(numbers) OPERATOR(pg_catalog.=) 1
							 AND pg_catalog.array_lower(numbers, 1) OPERATOR(pg_catalog.=) 1
							 AND pg_catalog.cardinality(numbers) OPERATOR(pg_catalog.>) 1
							 AND numbers[1] OPERATOR(pg_catalog.=) number
							 AND pg_catalog.array_position(numbers, NULL) IS NULL),
	UNIQUE (layer, number),
	/* dependencies (depends.sql): unmet frame-by-frame prerequisites */
	deps_left	int NOT NULL DEFAULT 0 CHECK (deps_left >= 0),
	/* a prerequisite of a layer, or of a chunked layer's tasks: its end is watched (depends.sql) */
	prereq		bool NOT NULL DEFAULT false,
	/*
	 * tasks of an unchunked layer wait for this one frame by frame, found
	 * by number (depend kind 'frames'), and its first end, which clears
	 * this, has yet to meet them
	 */
	frees_by_number bool NOT NULL DEFAULT false,
	/* runs that ended with one of the layer's requeue exit codes and were requeued */
	requeues	int NOT NULL DEFAULT 0 CHECK (requeues >= 0),
	/*
	 * A delayed task (a requeue or a retry delay): 'waiting' as users see
	 * it, but not bookable before this time, and not bookable at all until
	 * the background worker clears it (worker.sql, _delays_ended).  Kept
	 * while dependencies hold the task; cleared when it ends otherwise.
	 */
	not_before	timestamptz CHECK (not_before IS NULL OR state IN ('waiting', 'depend')),
	/*
	 * The task's memory once a retry after an OOM raised it above its
	 * layer's (NULL: the layer's).  A raised task that is waiting is
	 * booked from a dispatch queue row of its own, at this size, and not
	 * from its layer's (frame_raised, dispatch.sql).
	 */
	memory		bigint CHECK (memory > 0),
	/* why a dead task is dead, when it is not that its retries ran out */
	dead_reason text CHECK (dead_reason IS NULL OR
							(state = 'dead' AND pg_catalog.length(dead_reason) <= 200))
);
/*
 * The next bookable frame of a layer, without reading the rest of the
 * backlog.  A delayed task is not in it, so no booking ever reads one;
 * nor is a task whose memory an OOM raised (frame_raised, below), which
 * is booked only as that size.
 */
CREATE INDEX frame_waiting ON frameq.frame (layer, number)
	WHERE state = 'waiting' AND not_before IS NULL AND memory IS NULL;
/* the bookable tasks whose memory an OOM raised, by size: booked by size */
CREATE INDEX frame_raised ON frameq.frame (layer, memory, number)
	WHERE state = 'waiting' AND not_before IS NULL AND memory IS NOT NULL;
/* the delayed tasks by when they are due: the worker's one probe a round */
CREATE INDEX frame_delayed ON frameq.frame (not_before)
	WHERE state = 'waiting' AND not_before IS NOT NULL;
/* is anything of this job still live?  (finishing a job, progress) */
CREATE INDEX frame_live ON frameq.frame (job, state)
	WHERE state IN ('waiting', 'depend', 'running');
/* dependencies (depends.sql): a prerequisite layer's tasks not yet done */
CREATE INDEX frame_prereq_open ON frameq.frame (layer)
	WHERE prereq AND state IN ('waiting', 'depend', 'running', 'dead');
CREATE INDEX frame_prereq_idle ON frameq.frame (layer)
	WHERE prereq AND state IN ('waiting', 'depend', 'dead');
/* a job's dead tasks, which hold its dependents */
CREATE INDEX frame_dead ON frameq.frame (job) WHERE state = 'dead';
/* tasks held by their layer's or job's dependencies only: freed together */
CREATE INDEX frame_held ON frameq.frame (layer) WHERE state = 'depend' AND deps_left = 0;

/*
 * Frame-by-frame dependencies of a chunked layer's tasks: task frame waits
 * for task on_frame (of another layer of the job, holding one of its frame
 * numbers).
 */
CREATE TABLE frameq.frame_depend (
	on_frame	bigint NOT NULL,
	frame		bigint NOT NULL,
	satisfied	bool NOT NULL DEFAULT false,
	PRIMARY KEY (on_frame, frame)
);
CREATE INDEX frame_depend_frame ON frameq.frame_depend (frame);

/*
 * A proc is one booking.  Its id is the run token: 63 random bits, never a
 * sequence, so no failover can hand the same token out twice.  Every column
 * the release path needs (ledger keys, resources) is copied in at booking so
 * that a DELETE alone is enough to release.
 *
 * No column carries a foreign key.  job, layer, show, folder and allocation
 * are copies of the frame's and the host's; a key on them would take a KEY
 * SHARE lock on the same job, show and allocation rows in every concurrent
 * booking, which is the hot row frameq exists to avoid; check() verifies
 * the copies.  frame and host would cost a key check per proc (a query and
 * a row lock each) that proves nothing new: reserve() has the frame locked
 * and updated and the insert trigger updates the host row, and a direct
 * INSERT is refused unless its frame and host are found and locked (see
 * release.c).  What the keys would also guard, a frame or host that
 * disappears or changes its id under a proc or a run record, the guard
 * triggers (procs.sql) refuse (frameq itself never deletes either).
 */
CREATE TABLE frameq.proc (
	id			bigint PRIMARY KEY CHECK (id > 0),
	frame		bigint NOT NULL UNIQUE,
	host		int NOT NULL,
	epoch		bigint NOT NULL,
	job			bigint NOT NULL,
	layer		bigint NOT NULL,
	show		int NOT NULL,
	folder		int,
	allocation	int NOT NULL,
	limits		int[] NOT NULL DEFAULT '{}',
	cores_cc	int NOT NULL CHECK (cores_cc > 0),
	memory		bigint NOT NULL CHECK (memory >= 0),
	gpus		int NOT NULL CHECK (gpus >= 0),
	gpu_memory	bigint NOT NULL CHECK (gpu_memory >= 0),
	state		text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'killing')),
	booked_at	timestamptz NOT NULL DEFAULT clock_timestamp(),
	/* kill order: what was asked, when, and the frame state wanted on release */
	kill_reason text,
	kill_at		timestamptz,
	want_state	text CHECK (want_state IN ('waiting', 'dead', 'eaten')),
	kill_sent_at timestamptz,
	CHECK ((state = 'killing') = (want_state IS NOT NULL AND kill_at IS NOT NULL)),
	/*
	 * When the task has run for its timeout (booked_at + the layer's
	 * effective timeout, set at booking); NULL: no timeout.  The worker
	 * makes a kill order of a running proc past it (worker.sql, _time_out).
	 */
	timeout_at	timestamptz,
	/*
	 * A kill order frameq gave because the render misbehaved: the run
	 * reason its release records ('timeout', 'stalled'), and the release
	 * counts a retry (src/release.c).  NULL for every other kill order.
	 */
	kill_cause	text,
	/* the render's last report (heartbeat): its last line, progress, and last output */
	last_line	text CHECK (pg_catalog.length(last_line) <= 200),
	progress	real CHECK (progress BETWEEN 0 AND 100),
	last_output_at timestamptz,
	CONSTRAINT proc_kill_cause CHECK (kill_cause IS NULL
									 OR (kill_cause IN ('timeout', 'stalled') AND state = 'killing'))
);
CREATE INDEX proc_host ON frameq.proc (host, state);
/* the kill orders, few: a worker round sends them without reading the running procs */
CREATE INDEX proc_kill_orders ON frameq.proc (id) WHERE state = 'killing';
/* the running procs by deadline: a worker round reads only those due (_time_out) */
CREATE INDEX proc_timeout_due ON frameq.proc (timeout_at)
	WHERE state = 'running' AND timeout_at IS NOT NULL;

/*
 * One row per attempt, kept forever, written by the proc insert trigger
 * from a proc whose frame and host exist; no foreign keys: see proc.
 */
CREATE TABLE frameq.run (
	proc		bigint PRIMARY KEY,
	frame		bigint NOT NULL,
	job			bigint NOT NULL,
	host		int NOT NULL,
	epoch		bigint NOT NULL,
	cores_cc	int NOT NULL,
	memory		bigint NOT NULL,
	gpus		int NOT NULL,
	started_at	timestamptz NOT NULL,
	ended_at	timestamptz,
	exit_status int,
	exit_signal int,
	max_rss		bigint,
	reason		text CHECK (reason IN ('completed', 'killed', 'timeout', 'stalled', 'oom',
									   'host_lost', 'host_rebooted', 'lost_by_agent',
									   'operator')),
	kill_reason text,
	end_state	text,
	CHECK ((ended_at IS NULL) = (reason IS NULL)),
	/*
	 * where the render's output is, "agent host:path", as its agent
	 * reported it at the render's start (report_log); NULL if never reported
	 */
	log			text CHECK (pg_catalog.length(log) <= 1024)
);
CREATE INDEX run_frame ON frameq.run (frame);

/*
 * Which roles may submit to and control a show's jobs (admin.sql, show
 * grants).  role is an oid, not a name: a rename keeps its grants, a new
 * role of the same name gets none.  As regrole it is still an oid, but a
 * dump writes it as the role's name and a restore reads the name back, as
 * pg_dump does for GRANTs (dump.sql), so that it names the same role in
 * another cluster.
 */
CREATE TABLE frameq.show_grant (
	show		int NOT NULL REFERENCES frameq.show,
	role		regrole NOT NULL,
	granted_at	timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
	PRIMARY KEY (show, role)
);

/*
 * Failed runs of a job's tasks per host (host_failure_limit, limits.c):
 * written by the release of each failed run, in its transaction; the row
 * goes when unblock_host() resets the count.  blocked_at is set by the
 * failure that reaches the job's limit: from then on reserve() gives the
 * host none of the job's tasks.  No foreign keys, as on proc and run: a
 * key would lock the job row in every failing release.
 */
CREATE TABLE frameq.job_host_failure (
	job			bigint NOT NULL,
	host		int NOT NULL,
	failures	int NOT NULL CHECK (failures > 0),
	counted_since timestamptz NOT NULL,		/* the end of the first failed run counted */
	blocked_at	timestamptz,
	PRIMARY KEY (job, host)
);

/*
 * Jobs whose limits on failure a release could not settle because another
 * session kept the job's row locked past frameq.lock_wait (limits.c): the
 * job's host_blocks mark, and, if died, whether its dead tasks now pause
 * it.  The background worker settles them every round until it gets the
 * row (worker.sql, _settle_job_limits).  Rows are few and short-lived.
 */
CREATE TABLE frameq.job_limit_check (
	job			bigint PRIMARY KEY,
	died		bool NOT NULL DEFAULT false,
	since		timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
);

/*
 * Jobs whose last frames ended while another session kept the job's row
 * locked past frameq.lock_wait (src/release.c, maybe_finish_job): whether
 * the job is finished is left to the background worker, which asks again
 * every round until it gets the row (worker.sql, _finish_checked_jobs).
 * Rows are few and short-lived.
 */
CREATE TABLE frameq.job_finish_check (
	job			bigint PRIMARY KEY,
	since		timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
);

/*
 * The dispatch queue: a row per layer that may have waiting frames, per
 * tag it asks for.  dispatch.sql says how rows come and go and why no
 * waiting frame is passed over.  No row is ever updated and there is no
 * unique key: nobody ever waits on this table.
 */
CREATE TABLE frameq.dispatch_queue (
	show		int NOT NULL,
	tag			text NOT NULL,			/* '' for a layer with no tags */
	gpu			bool NOT NULL,			/* the layer needs gpus */
	priority	int NOT NULL,			/* the job's, when the row was written */
	job			bigint NOT NULL,
	dispatch_order int NOT NULL,
	layer		bigint NOT NULL,
	min_cc		int NOT NULL,
	memory		bigint NOT NULL,
	gpus		int NOT NULL,
	gpu_memory	bigint NOT NULL,
	mem_class	smallint NOT NULL,		/* size classes of memory and min_cc (dispatch.sql) */
	core_class	smallint NOT NULL
);
/*
 * One stream per (show, tag, gpu, size classes), in policy order; the
 * minimums are key columns so that a layer too big for the host is
 * rejected on the index tuple, without a heap fetch.
 */
CREATE INDEX dispatch_queue_order ON frameq.dispatch_queue
	(show, tag, gpu, mem_class, core_class, priority DESC, job, dispatch_order, layer,
	 min_cc, memory, gpus, gpu_memory);
CREATE INDEX dispatch_queue_layer ON frameq.dispatch_queue (layer);

/*
 * The streams the dispatch queue has had rows in: a set, written with the
 * rows (duplicates are possible and harmless), read by reserve() so that
 * it opens only streams that may have rows, and cleared of streams left
 * empty by the worker (dispatch.sql, "Size classes").
 */
CREATE TABLE frameq.dispatch_class (
	show		int NOT NULL,
	tag			text NOT NULL,
	gpu			bool NOT NULL,
	mem_class	smallint NOT NULL,
	core_class	smallint NOT NULL
);
CREATE INDEX dispatch_class_stream ON frameq.dispatch_class
	(show, tag, gpu, mem_class, core_class);

/*
 * The key run secrets are derived from (agent.sql, run secrets): one row,
 * 32 random bytes or more, readable by the extension's owner only
 * (grants.sql).  agent.sql draws it.
 */
CREATE TABLE frameq.run_secret_key (
	one			bool PRIMARY KEY DEFAULT true CHECK (one),
	key			bytea NOT NULL CHECK (pg_catalog.length(key) OPERATOR(pg_catalog.>=) 32)
);

/*
 * Totals that outlive the rows they count, for the metrics view: what
 * prune() removed (metric 'runs_pruned' by run reason, 'jobs_pruned',
 * 'frames_pruned' by task state) and the leases the worker expired
 * ('lease_expired').  Written only by prune() and by the worker's lease
 * expiry, never by a booking or a release: a row here is no hot row.
 */
CREATE TABLE frameq.tally (
	metric		text NOT NULL,
	label		text NOT NULL DEFAULT '',
	value		bigint NOT NULL CHECK (value >= 0),
	PRIMARY KEY (metric, label)
);

/* the agent-facing booking row returned by reserve() */
CREATE TYPE frameq.booking AS (
	proc		bigint,
	frame		bigint,
	job			bigint,
	layer		bigint,
	frame_number int,
	command		text,
	cores		numeric,
	memory		bigint,
	gpus		int,
	gpu_memory	bigint,
	env			jsonb,
	/* the render's run secret (agent.sql): proves to owns() that the caller is that render */
	run_secret	text,
	/* the layer's progress_pattern, or NULL */
	progress_pattern text
);

/*
 * The audit trail (util.sql, _audit; view actions): one row per operator
 * or administration action, written by frameq._audit() in the action's
 * own transaction, so that an action that fails leaves no row.  Rows are
 * only ever inserted: no row is updated (a trigger refuses it), no unique
 * key (the id is drawn from a sequence and has no index, so two writers
 * never wait on each other), no foreign key (a key would lock the job,
 * frame or host row it names, and the row outlives what it names), and
 * no trigger on any other table writes here: the agent's calls never
 * touch it.  role is session_user, the login, which SET ROLE cannot
 * change; detail holds the action's arguments, never a token, a run
 * secret or an env value.
 */
CREATE TABLE frameq.action (
	id			bigserial NOT NULL,
	at			timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
	role		text NOT NULL DEFAULT session_user,
	action		text NOT NULL CHECK (action OPERATOR(pg_catalog.~) '^[a-z_]{1,64}$'),
	job			bigint,
	layer		bigint,
	frame		bigint,
	host		int,
	detail		jsonb NOT NULL DEFAULT '{}' CHECK (pg_catalog.jsonb_typeof(detail) = 'object')
);
CREATE INDEX action_job ON frameq.action (job, id) WHERE job IS NOT NULL;
