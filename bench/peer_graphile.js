// Item 8 of bench/run: graphile-worker (the peer queue) on the same server,
// in its own database, draining no-op jobs at the same concurrency as
// frameq's frame lifecycle.  graphile-worker is installed by bench/run into
// a scratch directory outside the repository and found through NODE_PATH.
//
//     node bench/peer_graphile.js DATABASE JOBS CONCURRENCY [batched]
//
// Connects through the PG* environment (PGHOST is the socket directory).
// Adds JOBS jobs in one add_jobs() call, starts one worker pool of
// CONCURRENCY, and times from the first job's start to the last job's
// success.  "batched" turns on graphile-worker's local queue and batched
// completion (its documented high-throughput setting); the default is one
// claim and one completion per job, as frameq's lifecycle does.
// Prints one line of JSON.
"use strict";

const { run, runMigrations } = require("graphile-worker");
const { Pool } = require("pg");
const { EventEmitter } = require("events");

async function main() {
	const [database, jobsArg, concArg, mode] = process.argv.slice(2);
	const jobs = Number(jobsArg);
	const concurrency = Number(concArg);
	const batched = mode === "batched";
	if (!database || !(jobs > 0) || !(concurrency > 0)) {
		console.error("usage: peer_graphile.js DATABASE JOBS CONCURRENCY [batched]");
		process.exit(2);
	}
	const pgPool = new Pool({ database, max: concurrency + 4 });
	pgPool.on("error", (e) => console.error("pool error:", e.message));
	pgPool.on("connect", (c) => c.on("error", (e) => console.error("client error:", e.message)));
	const silent = () => () => {};
	const { Logger } = require("graphile-worker");
	const logger = new Logger(silent);

	await runMigrations({ pgPool, logger });
	const client = await pgPool.connect();
	try {
		await client.query("DELETE FROM graphile_worker._private_jobs");
		const t = process.hrtime.bigint();
		await client.query(
			`SELECT graphile_worker.add_jobs(ARRAY(
				SELECT ROW('noop', '{}'::json, NULL, NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec
				  FROM generate_series(1, $1)))`,
			[jobs],
		);
		var addMs = Number(process.hrtime.bigint() - t) / 1e6;
	} finally {
		client.release();
	}

	const events = new EventEmitter();
	let first = null;
	let last = null;
	let prev = null;
	let maxGapNs = 0n;
	let done = 0;
	let failed = 0;
	let finish;
	const finished = new Promise((resolve) => (finish = resolve));
	events.on("job:start", () => {
		if (first === null) first = process.hrtime.bigint();
	});
	events.on("job:success", () => {
		const now = process.hrtime.bigint();
		if (prev !== null && now - prev > maxGapNs) maxGapNs = now - prev;
		prev = now;
		done++;
		if (done === jobs) {
			last = process.hrtime.bigint();
			finish();
		}
	});
	events.on("job:error", () => failed++);

	const preset = batched
		? { worker: { localQueue: { size: 500, refetchDelay: { durationMs: 10 } },
					  completeJobBatchDelay: 0, failJobBatchDelay: 0 } }
		: {};
	const runner = await run({
		pgPool,
		logger,
		events,
		concurrency,
		noHandleSignals: true,
		pollInterval: 1000,
		taskList: { noop: async () => {} },
		preset,
	});
	const timeout = setTimeout(() => finish(), 600 * 1000);
	await finished;
	clearTimeout(timeout);
	await runner.stop();
	// job:success fires as the task returns; its completion may still be
	// committing: give the queue a moment to empty
	let left = 0;
	for (let i = 0; i < 50; i++) {
		left = (await pgPool.query("SELECT count(*)::int AS n FROM graphile_worker._private_jobs")).rows[0].n;
		if (left === 0) break;
		await new Promise((r) => setTimeout(r, 100));
	}
	await pgPool.end();

	const seconds = last === null ? null : Number(last - first) / 1e9;
	console.log(JSON.stringify({
		jobs, concurrency, batched, done, failed, left,
		add_ms: Math.round(addMs),
		seconds,
		// the longest pause between two completions: a stall shows here
		max_gap_ms: Number(maxGapNs) / 1e6,
		jobs_per_s: seconds ? (jobs - 1) / seconds : null,
	}));
	process.exit(done === jobs && left === 0 ? 0 : 1);
}

main().catch((e) => {
	console.error(e);
	process.exit(1);
});
