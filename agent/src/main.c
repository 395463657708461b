/*
 * main.c: frameq-agent's main loop.
 *
 * One thread, one database connection, one poll() over the connection and a
 * signalfd.  The life of the agent:
 *
 *   1. recover: kill every render an earlier agent left (found in the state
 *      directory) and wait until it is dead; what ended on its own is
 *      reported before attaching, while its proc may still be live;
 *   2. attach (with the machine's boot id): a new lease epoch; LISTEN on the
 *      host's kill channel;
 *   3. run: heartbeat every third of the lease with every proc still alive
 *      here, reserve while there is room, launch each booking under a
 *      supervisor, report each end with complete(); the kill orders in the
 *      answer of an attach or heartbeat go to the supervisor at once.  From
 *      frameq 0.6.0 (FRAMEQ_BATCH) the ends that come together go in one
 *      complete_many(), in one transaction with the reserve() of the room
 *      they freed (send_batch: report what ended, book what fits, commit
 *      once);
 *   4. on a lost lease (FQ001/FQ002): kill everything, wait until it is dead,
 *      attach again.
 *
 * The lease deadline each supervisor holds is
 *
 *     deadline = (lease clock when the renewal that succeeded was SENT)
 *                + lease_ttl - kill_grace
 *
 * at which it sends SIGTERM to its render's group, and SIGKILL kill_grace
 * later: the render is dead by send time + lease_ttl.  The server's lease
 * ran from when it received that renewal, later than it was sent, and it
 * releases the frame only lease_ttl * (1 + clock_drift) + lease_margin after
 * that (doc/release.md).  kill_grace is capped at a third of the lease, so a
 * deadline is always more than a heartbeat interval away.
 *
 * Every call is safe to lose: a heartbeat or attach whose answer is lost
 * moves no deadline; a reserve whose answer is lost left bookings the agent
 * never saw, which its next heartbeats release (lost_by_agent); a complete
 * whose answer is lost is sent again and answers 'duplicate'.
 *
 * Notifications on the host's channel are hints, never orders: any role
 * that can connect can NOTIFY any channel, with any payload.  A
 * notification only makes the agent heartbeat now (at most once per
 * HINT_GAP_NS, 100 ms, however many arrive), and only the kill orders in
 * the answer to the agent's own, token-authenticated call stop a render.
 * The same holds for frameq_ready (tasks became bookable without a
 * release: a submit, a dependency met by an operator): it only makes the
 * agent reserve sooner, at most once per HINT_GAP_NS, if it has room.
 *
 * The host token: a call refused with 28P01 (the token is wrong, e.g. it
 * was rotated) makes the agent read its token file again, once, and retry
 * with what it holds now.  If the file holds the same token, the agent
 * gives up on it: it makes no call until the file changes or a SIGHUP.
 *
 * The extension's version is read on every connect (a failover may reach a
 * server whose database is at another version) and before every attach
 * (ALTER EXTENSION may have run since).  If the agent does not
 * speak it, or frameq is not installed there, it makes no call, kills its
 * renders if it holds a lease, and exits with EXIT_VERSION.  From frameq
 * 0.5.0 (FRAMEQ_REPORTS) heartbeats carry a report on each render (its idle
 * time, last output line and progress), complete() says whether a render
 * was an OOM, and bookings carry a progress pattern; older ones get the
 * calls as before.  From 0.6.0 (FRAMEQ_RUN_LOG) the agent tells where each
 * render's output goes (report_log) at the head of its next transaction
 * of reports or of a reserve, or on its own a second after the render's
 * start if none came (runs.c, "Log reports").
 *
 * Memory: each supervisor measures its render's tree and kills it when it
 * uses more than its booking plus the host's unbooked memory
 * (--enforce-memory, the default; supervisor.c, memory.c).  Where the
 * agent may, each render gets a cgroup of its own for that
 * (memory_cgroup_base); decided once, at start.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"

enum phase
{
	PH_RECOVER,					/* killing what an earlier agent left */
	PH_ATTACH,					/* no lease: attach when connected */
	PH_RUNNING,					/* holding a lease */
	PH_LEASE_LOST				/* lease lost: killing everything */
};

static struct config cfg;
static int	saved_argc;
static char **saved_argv;
static char *token;
static char boot_id[256];
static struct resources machine;
static double offer_cores;
static int64_t offer_memory;
static int	offer_gpus;

static int	sigfd = -1;
static enum phase phase = PH_RECOVER;
static int64_t epoch;
static double lease_ttl;		/* seconds, as the server said */
static int64_t grace_ns;		/* the kill grace in force (capped) */
static int64_t lease_deadline;	/* what the supervisors hold (see above) */
static int64_t launch_hold_until;	/* no reserve after a launch error */
static int64_t next_heartbeat;	/* also: next attach attempt */
static int64_t next_reserve;
static int64_t last_reserve_at;	/* when the last reserve was sent */
static int64_t next_connect;
static int	connect_failures;
static char channel[96];
static bool listening;
static int64_t last_wait_log;

static bool stopping;
static bool stop_kill;
static int	final_beats;
static int64_t stop_give_up;
static int	exit_code;
static bool reload_requested;

/*
 * Kill hints: the first notification after a quiet HINT_GAP heartbeats at
 * once; any arriving later in the gap wait for its end, so a flood costs at
 * most one heartbeat per gap and no notification goes unanswered.
 */
#define HINT_GAP_NS (NS_PER_SEC / 10)
static bool hint_pending;		/* a notification not yet followed by a heartbeat */
static int	hint_count;			/* notifications since the last heartbeat */
static int64_t hint_beat_at;	/* when the last hint heartbeat was sent */

/* the token was refused and the file held no other: no calls until it changes */
static bool token_given_up;
static int64_t next_token_check;

/* the database's frameq is not one this agent speaks: stop once nothing runs */
static bool version_refused;

/* the database's frameq is FRAMEQ_REPORTS or later (read with its version) */
static bool speaks_reports;

/* ... and FRAMEQ_RUN_LOG or later */
static bool speaks_run_log;

/* ... and FRAMEQ_BATCH or later */
static bool speaks_batch;

/* where render cgroups go ("" none: memory is measured through /proc) */
static char cgroup_base[PATH_MAX];

#define SEC(x) ((int64_t) ((x) * (double) NS_PER_SEC))

static int
call_timeout_ms(void)
{
	double		t = lease_ttl / 2 > 5 ? lease_ttl / 2 : 5;

	return (int) (t * 1000);
}

static void
update_grace(void)
{
	double		g = cfg.kill_grace;

	if (lease_ttl > 0 && g > lease_ttl / 3)
	{
		static double warned;

		if (warned != lease_ttl)
			log_event("warning", "message=\"kill grace %.1fs is more than a third of the lease (%.1fs); using %.2fs\"",
					  cfg.kill_grace, lease_ttl, lease_ttl / 3);
		warned = lease_ttl;
		g = lease_ttl / 3;
	}
	grace_ns = SEC(g);
}

static void
compute_offer(void)
{
	offer_cores = cfg.cores > 0 ? cfg.cores : machine.cores;
	offer_memory = cfg.memory > 0 ? cfg.memory : machine.memory;
	offer_gpus = cfg.gpus >= 0 ? cfg.gpus : machine.gpus;
	log_event("resources", "host=%s detected_cores=%.2f detected_memory=%" PRId64 " detected_gpus=%d detected_gpu_memory=%" PRId64
			  " offered_cores=%.2f offered_memory=%" PRId64 " offered_gpus=%d max_frames=%d tags=%s",
			  cfg.host, machine.cores, machine.memory, machine.gpus, machine.gpu_memory,
			  offer_cores, offer_memory, offer_gpus, cfg.max_frames,
			  cfg.tags[0] ? cfg.tags : "-");
	if (offer_cores > machine.cores || offer_memory > machine.memory || offer_gpus > machine.gpus)
		log_event("warning", "message=\"offering more than the machine has\"");
	/* each render's memory limit: its booking plus what the offer has unbooked */
	runs_set_host_memory(cfg.enforce_memory ? offer_memory : 0);
}

/*
 * How renders' memory will be measured, said once at start: in a cgroup
 * per render if the agent may make them, else through /proc; whether the
 * kernel log can prove an OOM kill; whether limits are enforced.
 */
static void
choose_memory_watch(void)
{
	char		why[PATH_MAX + 256];

	if (memory_cgroup_base(cgroup_base, sizeof(cgroup_base), why, sizeof(why)))
		log_event("memory", "method=cgroup cgroups=%s/render.<proc> interval=%.3fs kmsg=%s enforce=%s",
				  cgroup_base, (double) MEMORY_SAMPLE_NS / NS_PER_SEC,
				  memory_kmsg_readable() ? "readable" : "unreadable",
				  cfg.enforce_memory ? "yes" : "no");
	else
	{
		cgroup_base[0] = '\0';
		log_event("memory", "method=proc tree=%s interval=%.3fs kmsg=%s enforce=%s cgroup=\"%s\"",
				  memory_tree_walkable() ? "children" : "render-only",
				  (double) MEMORY_SAMPLE_NS / NS_PER_SEC,
				  memory_kmsg_readable() ? "readable" : "unreadable",
				  cfg.enforce_memory ? "yes" : "no", log_clean(why));
	}
}

/* a fault-injection setting is worth a line at every start and reload */
static void
warn_faults(void)
{
	if (cfg.fault_drop_reports > 0)
		log_event("warning", "fault_drop_reports=%g message=\"fault injection: %g%% of completion reports are dropped (for tests only)\"",
				  cfg.fault_drop_reports, cfg.fault_drop_reports);
}

static int
mkdir_p(const char *path, mode_t mode)
{
	char		buf[PATH_MAX];

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++)
		if (*p == '/')
		{
			*p = '\0';
			if (mkdir(buf, 0755) != 0 && errno != EEXIST)
				return -1;
			*p = '/';
		}
	if (mkdir(buf, mode) != 0 && errno != EEXIST)
		return -1;
	return 0;
}

static void
read_boot_id(void)
{
	int			fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	ssize_t		n = -1;

	if (fd >= 0)
	{
		n = read(fd, boot_id, sizeof(boot_id) - 1);
		close(fd);
	}
	if (n <= 0)
	{
		fprintf(stderr, "frameq-agent: cannot read /proc/sys/kernel/random/boot_id\n");
		exit(2);
	}
	boot_id[n] = '\0';
	boot_id[strcspn(boot_id, "\r\n")] = '\0';
}

/*
 * Parse a bigint[] in text form ("{1,2,3}") and kill each: the kill orders
 * of the answer to one of the agent's own calls (source), the only ones it
 * acts on.
 */
static void
kill_list(const char *text, const char *source)
{
	const char *p = text;

	if (!p)
		return;
	while (*p)
	{
		char	   *end;
		long long	v;

		if (*p < '0' || *p > '9')
		{
			p++;
			continue;
		}
		v = strtoll(p, &end, 10);
		log_event("kill-order", "proc=%lld source=%s", v, source);
		runs_kill(v, WHY_ORDER, source);
		p = end;
	}
}

static void
lease_lost(const char *why)
{
	log_event("lease-lost", "epoch=%" PRId64 " reason=\"%s\" alive=%d", epoch, why, runs_alive());
	runs_kill_all(WHY_LEASE, "lease lost");
	phase = PH_LEASE_LOST;
	last_wait_log = 0;
}

/* a failed call: true if it was the lease (then handled) */
static bool
lease_error(struct pg_result *res)
{
	const char *st = db_sqlstate(res);

	if (strcmp(st, "FQ001") == 0 || strcmp(st, "FQ002") == 0)
	{
		char		why[512];

		snprintf(why, sizeof(why), "%s: %s", st, db_error(res));
		lease_lost(why);
		return true;
	}
	return false;
}

/*
 * A call was refused with 28P01: the server does not take our token (it
 * was rotated, or the file is wrong).  Read the token file again, once: if
 * it holds another token, use it and retry the call (true).  Otherwise give
 * up on the token: no call until the file changes (looked at every 10 s)
 * or a SIGHUP; meanwhile the supervisors' deadlines pass as for any agent
 * cut off from the database.
 */
static bool
token_refused(const char *call)
{
	char		err[1024];
	char	   *t = config_read_token(cfg.token_file, err, sizeof(err));

	if (t && strcmp(t, token) != 0)
	{
		log_event("token-reread", "call=%s file=%s result=changed message=\"the server refused the host token (28P01); retrying with the token now in the file\"",
				  call, cfg.token_file);
		free(token);
		token = t;
		return true;
	}
	log_event("token-refused", "call=%s file=%s result=%s message=\"the server refused the host token (28P01) and the token file holds no other: giving up; no call until the file changes or SIGHUP\"",
			  call, cfg.token_file, t ? "unchanged" : log_clean(err));
	free(t);
	token_given_up = true;
	next_token_check = lease_clock_ns() + SEC(10);
	return false;
}

/* given up on the token: has the file another one now? */
static void
token_check(void)
{
	char		err[1024];
	char	   *t;

	if (lease_clock_ns() < next_token_check)
		return;
	next_token_check = lease_clock_ns() + SEC(10);
	t = config_read_token(cfg.token_file, err, sizeof(err));
	if (!t || strcmp(t, token) == 0)
	{
		free(t);
		return;
	}
	log_event("token-reread", "file=%s result=changed message=\"the token file changed; trying the new token\"",
			  cfg.token_file);
	free(token);
	token = t;
	token_given_up = false;
	next_heartbeat = 0;
	next_reserve = 0;
}

/* "1.10.2" -> parts; false unless it is three dot-separated numbers */
static bool
parse_version(const char *v, long parts[3])
{
	for (int i = 0; i < 3; i++)
	{
		char	   *end;

		if (*v < '0' || *v > '9')
			return false;
		parts[i] = strtol(v, &end, 10);
		if (*end != (i < 2 ? '.' : '\0'))
			return false;
		v = end + (i < 2);
	}
	return true;
}

/* <0, 0, >0 as a is older than, the same as, newer than b (both parsed) */
static int
version_cmp(const long a[3], const long b[3])
{
	for (int i = 0; i < 3; i++)
		if (a[i] != b[i])
			return a[i] < b[i] ? -1 : 1;
	return 0;
}

/*
 * Just connected, or about to attach: is the database's frameq one this agent speaks
 * (FRAMEQ_OLDEST to FRAMEQ_NEWEST)?  If not, say which version it is and
 * what to do, disconnect, and stop: kill the renders of the lease held, if
 * any, and exit with EXIT_VERSION once none is alive (main()).
 */
static bool
extension_spoken(void)
{
	const char *found = db_extension_version();
	long		v[3],
				oldest[3],
				newest[3];
	char		msg[512];

	if (!parse_version(FRAMEQ_OLDEST, oldest) || !parse_version(FRAMEQ_NEWEST, newest))
		abort();				/* the defines above are wrong */
	if (!found[0])
		snprintf(msg, sizeof(msg),
				 "the frameq extension is not installed in database %s: check the dbname in --conninfo (frameq runs in the database named by the server's frameq.database), or run CREATE EXTENSION frameq there",
				 db_database());
	else if (!parse_version(found, v))
		snprintf(msg, sizeof(msg),
				 "the frameq extension in database %s has version %s, which this agent cannot read (it speaks %s to %s)",
				 db_database(), found, FRAMEQ_OLDEST, FRAMEQ_NEWEST);
	else if (version_cmp(v, oldest) < 0)
		snprintf(msg, sizeof(msg),
				 "the frameq extension in database %s is %s, older than this agent speaks (%s to %s): run ALTER EXTENSION frameq UPDATE in that database, or run a frameq-agent built for %s",
				 db_database(), found, FRAMEQ_OLDEST, FRAMEQ_NEWEST, found);
	else if (version_cmp(v, newest) > 0)
		snprintf(msg, sizeof(msg),
				 "the frameq extension in database %s is %s, newer than this agent speaks (%s to %s): install a frameq-agent built for %s",
				 db_database(), found, FRAMEQ_OLDEST, FRAMEQ_NEWEST, found);
	else
	{
		long		reports[3],
					run_log[3],
					batch[3];

		if (!parse_version(FRAMEQ_REPORTS, reports) || !parse_version(FRAMEQ_RUN_LOG, run_log) ||
			!parse_version(FRAMEQ_BATCH, batch))
			abort();
		speaks_reports = version_cmp(v, reports) >= 0;
		speaks_run_log = version_cmp(v, run_log) >= 0;
		speaks_batch = version_cmp(v, batch) >= 0;
		return true;
	}

	speaks_reports = false;
	speaks_run_log = false;
	speaks_batch = false;
	log_event("version-refused", "agent=%s frameq=%s speaks=%s-%s exit_status=%d message=\"%s\"",
			  AGENT_VERSION, found[0] ? log_clean(found) : "none", FRAMEQ_OLDEST, FRAMEQ_NEWEST,
			  EXIT_VERSION, log_clean(msg));
	fprintf(stderr, "frameq-agent: %s\n", msg);
	version_refused = true;
	db_disconnect("the frameq extension's version");
	if (phase == PH_RUNNING)
		lease_lost("the frameq extension's version is not one this agent speaks");
	return false;
}

static bool
do_attach(void)
{
	const char *params[3] = {cfg.host, token, boot_id};
	struct pg_result *res;
	int64_t		sent;
	double		ttl;

	/* its answer carries every kill order: no hint is pending after it */
	hint_pending = false;
	hint_count = 0;
	res = db_exec("SELECT a.epoch, extract(epoch FROM a.lease_ttl)::float8, a.kill::text, "
				  "a.channel FROM frameq.attach($1, $2, $3) a",
				  3, params, call_timeout_ms(), &sent);
	if (!res)
		return false;
	if (!db_ok(res) || db_ntuples(res) != 1)
	{
		const char *st = db_sqlstate(res);
		bool		config_error = strcmp(st, "28P01") == 0 || strcmp(st, "42704") == 0;

		log_event("attach-failed", "host=%s sqlstate=%s error=\"%s\"%s", cfg.host, st, db_error(res),
				  config_error ? " hint=\"is the host registered and the token file right? (SIGHUP re-reads it)\"" : "");
		next_heartbeat = lease_clock_ns() + (config_error ? SEC(10) : SEC(1));
		if (strcmp(st, "28P01") == 0 && token_refused("attach"))
			next_heartbeat = 0;
		db_clear(res);
		return false;
	}
	epoch = strtoll(db_value(res, 0, 0), NULL, 10);
	ttl = strtod(db_value(res, 0, 1), NULL);
	lease_ttl = ttl > 0 ? ttl : 30;
	update_grace();
	log_event("attached", "host=%s epoch=%" PRId64 " lease_ttl=%.3fs boot_id=%s kill=%s",
			  cfg.host, epoch, lease_ttl, boot_id, db_value(res, 0, 2));
	lease_deadline = sent + SEC(lease_ttl) - grace_ns;
	runs_push_deadline(lease_deadline, grace_ns);
	/* procs of earlier epochs: none of ours is alive (we waited), nothing to do */
	kill_list(db_value(res, 0, 2), "attach");
	/* where the worker announces this host's kill orders (a hint: heartbeats carry them too) */
	snprintf(channel, sizeof(channel), "%s", db_isnull(res, 0, 3) ? "" : db_value(res, 0, 3));
	listening = false;
	db_clear(res);
	phase = PH_RUNNING;
	next_heartbeat = sent + SEC(lease_ttl / 3);
	next_reserve = 0;
	return true;
}

/*
 * Does the server take heartbeat's report and complete's oom flag?  From
 * FRAMEQ_REPORTS, whose functions have them.
 */
static bool
reports_taken(void)
{
	return speaks_reports && db_reports_taken();
}

/*
 * Renew the lease with every proc that may still run here, and, where the
 * server takes it, the report on each render's output.
 */
static struct pg_result *
call_heartbeat(const char *list, int64_t *sent, int *reported)
{
	char		ep[32];
	char	   *report = NULL;
	const char *params[5] = {cfg.host, token, ep, list, NULL};
	struct pg_result *res;

	snprintf(ep, sizeof(ep), "%" PRId64, epoch);
	*reported = 0;
	if (!reports_taken())
		return db_exec("SELECT extract(epoch FROM h.lease_ttl)::float8, h.kill::text "
					   "FROM frameq.heartbeat($1, $2, $3::bigint, $4::bigint[]) h",
					   4, params, call_timeout_ms(), sent);
	report = runs_report(db_server_utf8(), reported);
	params[4] = report;
	res = db_exec("SELECT extract(epoch FROM h.lease_ttl)::float8, h.kill::text "
				  "FROM frameq.heartbeat($1, $2, $3::bigint, $4::bigint[], $5::jsonb) h",
				  5, params, call_timeout_ms(), sent);
	free(report);
	return res;
}

static bool
do_heartbeat(void)
{
	char	   *list = runs_running_list(epoch);
	struct pg_result *res;
	int64_t		sent;
	double		ttl;
	int			hints,
				reported;
	char		shown[16] = "not-sent";

	/* this heartbeat answers every notification that has arrived so far */
	hints = hint_count;
	hint_pending = false;
	hint_count = 0;
	res = call_heartbeat(list, &sent, &reported);
	if (!res)
	{
		free(list);
		return false;
	}
	if (!db_ok(res) || db_ntuples(res) != 1)
	{
		if (!lease_error(res))
		{
			log_event("heartbeat-failed", "epoch=%" PRId64 " sqlstate=%s error=\"%s\"",
					  epoch, db_sqlstate(res), db_error(res));
			next_heartbeat = lease_clock_ns() + SEC(lease_ttl / 6 < 1 ? lease_ttl / 6 : 1);
			if (strcmp(db_sqlstate(res), "28P01") == 0 && token_refused("heartbeat"))
				next_heartbeat = 0;
		}
		db_clear(res);
		free(list);
		return false;
	}
	if (reports_taken())
		snprintf(shown, sizeof(shown), "%d", reported);
	ttl = strtod(db_value(res, 0, 0), NULL);
	if (ttl > 0 && ttl != lease_ttl)
	{
		lease_ttl = ttl;
		update_grace();
	}
	lease_deadline = sent + SEC(lease_ttl) - grace_ns;
	runs_push_deadline(lease_deadline, grace_ns);
	next_heartbeat = sent + SEC(lease_ttl / 3);
	log_event("lease-renewed", "epoch=%" PRId64 " lease_ttl=%.3fs running=%s kill=%s deadline_in=%.3fs reports=%s hints=%d",
			  epoch, lease_ttl, list, db_value(res, 0, 1),
			  (double) (lease_deadline - lease_clock_ns()) / NS_PER_SEC, shown, hints);
	kill_list(db_value(res, 0, 1), "heartbeat");
	db_clear(res);
	free(list);
	return true;
}

static bool
have_room(int *max_frames)
{
	double		cores;
	int64_t		memory;
	int			gpus,
				count;

	runs_usage(&cores, &memory, &gpus, &count);
	*max_frames = 0;
	if (offer_cores - cores < 0.01 || memory >= offer_memory)
		return false;
	if (cfg.max_frames > 0)
	{
		if (count >= cfg.max_frames)
			return false;
		*max_frames = cfg.max_frames - count;
		if (*max_frames > 1000)
			*max_frames = 1000;
	}
	return true;
}

/* a render that could not even start: the host is broken, do not churn */
static void
note_launch_error(void)
{
	if (runs_take_launch_error())
		launch_hold_until = lease_clock_ns() + SEC(10);
}

/*
 * May the agent book now, whenever the time comes (a reserve of its own,
 * or one with the reports of ended renders)?  Only with a lease, not
 * stopping, with room (*max_frames: how many at most; 0 as many as fit),
 * not after a render failed to start (for a while), and not while behind
 * on renewals (heartbeats failing): a render launched then would soon be
 * fenced.
 */
static bool
may_book(int *max_frames)
{
	note_launch_error();
	if (phase != PH_RUNNING || stopping || !have_room(max_frames))
		return false;
	if (lease_deadline - lease_clock_ns() < SEC(lease_ttl / 6))
		return false;
	return lease_clock_ns() >= launch_hold_until;
}

/* when the next reserve may go out; INT64_MAX if not now */
static int64_t
reserve_time(void)
{
	int			dummy;

	if (phase != PH_RUNNING || stopping || !have_room(&dummy))
		return INT64_MAX;
	/* behind on renewals: see may_book */
	if (lease_deadline - lease_clock_ns() < SEC(lease_ttl / 6))
		return INT64_MAX;

	/*
	 * A render ended, and its report goes within the report window with a
	 * booking (batched): that one books the room, which the server counts
	 * as taken until the report; a reserve of its own now would find
	 * nothing and cost a transaction.
	 */
	if (speaks_batch && db_batch_taken() && runs_reports_will_book(epoch))
		return INT64_MAX;
	return next_reserve > launch_hold_until ? next_reserve : launch_hold_until;
}

/* the run secret goes into an environment variable: hex digits only */
static void
set_secret(struct booking *b, const char *s)
{
	size_t		len = strlen(s);

	b->run_secret[0] = '\0';
	if (len == 0)
		return;
	if (len >= sizeof(b->run_secret) || strspn(s, "0123456789abcdefABCDEF") != len)
	{
		log_event("warning", "proc=%" PRId64 " message=\"the booking's run secret is not a short hex string; the render gets none\"",
				  b->proc);
		return;
	}
	memcpy(b->run_secret, s, len + 1);
}

/*
 * The reserve() statement: ask the server for bookings, at most max_frames
 * of them (0: as many as fit).  Its answer has one row per booking and env
 * entry, the layer's env as rows so that the agent needs no JSON parser.
 * The progress pattern (FRAMEQ_REPORTS on) is read by name through
 * to_jsonb, so that a booking without that column gives NULL, not an
 * error.  The struct holds what the statement points to.
 */
struct reserve_call
{
	char		ep[32],
				mf[16];
	const char *params[4];
	struct db_stmt st;
};

static void
reserve_stmt(struct reserve_call *c, int max_frames)
{
	snprintf(c->ep, sizeof(c->ep), "%" PRId64, epoch);
	c->params[0] = cfg.host;
	c->params[1] = token;
	c->params[2] = c->ep;
	c->params[3] = NULL;
	if (max_frames > 0)
	{
		snprintf(c->mf, sizeof(c->mf), "%d", max_frames);
		c->params[3] = c->mf;
	}
	c->st.sql = speaks_reports ?
		"SELECT b.proc, b.frame, b.job, b.layer, b.frame_number, b.command, "
		"b.cores::text, b.memory, b.gpus, b.gpu_memory, e.key, e.value, "
		"b.run_secret, to_jsonb(b) ->> 'progress_pattern' "
		"FROM frameq.reserve($1, $2, $3::bigint, $4::int) b "
		"LEFT JOIN LATERAL jsonb_each_text(b.env) e ON true" :
		"SELECT b.proc, b.frame, b.job, b.layer, b.frame_number, b.command, "
		"b.cores::text, b.memory, b.gpus, b.gpu_memory, e.key, e.value, "
		"b.run_secret, NULL::text "
		"FROM frameq.reserve($1, $2, $3::bigint, $4::int) b "
		"LEFT JOIN LATERAL jsonb_each_text(b.env) e ON true";
	c->st.nparams = 4;
	c->st.params = c->params;
}

/*
 * A reserve failed: decide when to ask again, at once if the token file
 * holds a new token, else after the reserve interval; a lost lease is
 * dealt with (lease_error).
 */
static void
reserve_failed(struct pg_result *res)
{
	next_reserve = lease_clock_ns() + SEC(cfg.reserve_interval);
	if (!lease_error(res))
		log_event("reserve-failed", "epoch=%" PRId64 " sqlstate=%s error=\"%s\"",
				  epoch, db_sqlstate(res), db_error(res));
	if (strcmp(db_sqlstate(res), "28P01") == 0 && token_refused("reserve"))
		next_reserve = 0;
}

/*
 * The log reports due to go with the agent's next transaction of reports
 * or of a reserve (true), unless one of them must go on its own: only for
 * the lease held.
 */
static bool
take_logs(struct log_batch *lb)
{
	if (!speaks_run_log || phase != PH_RUNNING || !runs_logs_take(lb, epoch))
		return false;
	if (!lb->alone)
		return true;
	runs_logs_free(lb);
	return false;
}

/*
 * The report_log statement failed: its reports go again on their own, or
 * are dropped if they went on their own; a lost lease and a refused token
 * are dealt with as for any call.
 */
static void
logs_failed(struct log_batch *lb, struct pg_result *res)
{
	(void) lease_error(res);
	runs_logs_failed(lb, res);
	if (strcmp(db_sqlstate(res), "28P01") == 0)
		(void) token_refused("report_log");
}

/*
 * A reserve of its own: its answer, or NULL if it failed (then dealt
 * with).  The log reports pending go before it, in its transaction (a
 * failed booking takes them back with it: they stay pending; if they
 * failed, nothing was booked, and the reserve goes again next round).
 */
static struct pg_result *
call_reserve(int max_frames)
{
	struct reserve_call c;
	struct log_batch lb;
	struct db_stmt st[2];
	struct pg_result *res[2];
	const char *params[5];
	char		ep[32];

	reserve_stmt(&c, max_frames);
	if (!take_logs(&lb))
	{
		res[1] = db_exec(c.st.sql, c.st.nparams, c.st.params, call_timeout_ms(), NULL);
		if (!res[1] || db_ok(res[1]))
			return res[1];
		reserve_failed(res[1]);
		db_clear(res[1]);
		return NULL;
	}
	runs_logs_stmt(&lb, cfg.host, token, ep, sizeof(ep), params, &st[0]);
	st[1] = c.st;
	if (!db_exec_many(2, st, call_timeout_ms(), res))
	{
		runs_logs_free(&lb);
		return NULL;
	}
	if (!db_ok(res[0]))
		logs_failed(&lb, res[0]);
	else if (!db_ok(res[1]))
		reserve_failed(res[1]);
	else
		runs_logs_done(&lb, res[0], "reserve");
	runs_logs_free(&lb);
	db_clear(res[0]);
	if (db_ok(res[1]))
		return res[1];
	db_clear(res[1]);
	return NULL;
}

/*
 * The log reports that are due on their own (none went with a transaction
 * of reports or of a reserve in time, or they failed in one).  An error
 * drops them: the log is only a help for finding the file.
 */
static void
send_logs(void)
{
	struct log_batch lb;
	struct db_stmt st;
	struct pg_result *res;
	const char *params[5];
	char		ep[32];

	if (!speaks_run_log || phase != PH_RUNNING || !runs_logs_take(&lb, epoch))
		return;
	lb.alone = true;
	runs_logs_stmt(&lb, cfg.host, token, ep, sizeof(ep), params, &st);
	res = db_exec(st.sql, st.nparams, st.params, call_timeout_ms(), NULL);
	if (res && db_ok(res))
		runs_logs_done(&lb, res, "alone");
	else if (res)
		logs_failed(&lb, res);
	db_clear(res);
	runs_logs_free(&lb);
}

/* when log reports are due on their own; INT64_MAX if none */
static int64_t
log_time(void)
{
	if (!speaks_run_log || phase != PH_RUNNING)
		return INT64_MAX;
	return runs_next_log();
}

/*
 * The booking of row i, whose first row it is.  Its command and progress
 * pattern point into res, which must outlive it; env has room for every
 * row of the answer.
 */
static void
booking_from_row(struct booking *b, struct pg_result *res, int i)
{
	b->proc = strtoll(db_value(res, i, 0), NULL, 10);
	b->frame = strtoll(db_value(res, i, 1), NULL, 10);
	b->job = strtoll(db_value(res, i, 2), NULL, 10);
	b->layer = strtoll(db_value(res, i, 3), NULL, 10);
	b->frame_number = atoi(db_value(res, i, 4));
	b->command = (char *) db_value(res, i, 5);
	snprintf(b->cores, sizeof(b->cores), "%s", db_value(res, i, 6));
	b->cores_n = strtod(b->cores, NULL);
	b->memory = strtoll(db_value(res, i, 7), NULL, 10);
	b->gpus = atoi(db_value(res, i, 8));
	b->gpu_memory = strtoll(db_value(res, i, 9), NULL, 10);
	b->env = calloc((size_t) db_ntuples(res) + 1, sizeof(char *));
	set_secret(b, db_isnull(res, i, 12) ? "" : db_value(res, i, 12));
	b->progress_pattern = db_isnull(res, i, 13) ? NULL : (char *) db_value(res, i, 13);
}

/*
 * Gather the answer's rows into bookings (as many as *nb says), one per
 * proc, with the env entries of all its rows.  A name that the render's
 * environment could not hold is left out, and said so, rather than
 * refusing the whole booking.
 */
static struct booking *
bookings_from_answer(struct pg_result *res, int *nb)
{
	int			n = db_ntuples(res);
	struct booking *bs = calloc((size_t) (n > 0 ? n : 1), sizeof(*bs));

	*nb = 0;
	for (int i = 0; i < n; i++)
	{
		int64_t		proc = strtoll(db_value(res, i, 0), NULL, 10);
		struct booking *b = NULL;

		for (int j = 0; j < *nb; j++)
			if (bs[j].proc == proc)
				b = &bs[j];
		if (!b)
		{
			b = &bs[(*nb)++];
			booking_from_row(b, res, i);
		}
		if (!db_isnull(res, i, 10))
		{
			const char *k = db_value(res, i, 10);

			if (!k[0] || strchr(k, '='))
				log_event("warning", "proc=%" PRId64 " message=\"env name '%s' is not valid; left out\"", proc, k);
			else if (asprintf(&b->env[b->nenv], "%s=%s", k,
							  db_isnull(res, i, 11) ? "" : db_value(res, i, 11)) >= 0)
				b->nenv++;
		}
	}
	return bs;
}

/*
 * Where renders write their output, as report_log takes it (FRAMEQ_RUN_LOG
 * on): this machine's name, and the log dir as an absolute path (a
 * relative one is the supervisors': they open it from the work dir).
 */
static void
log_place(char *machine, size_t mlen, char *dir)
{
	char		path[PATH_MAX];

	if (gethostname(machine, mlen) != 0)
		snprintf(machine, mlen, "%s", cfg.host);
	machine[mlen - 1] = '\0';
	if (cfg.log_dir[0] == '/')
		snprintf(path, sizeof(path), "%s", cfg.log_dir);
	else
		snprintf(path, sizeof(path), "%s/%s", cfg.work_dir, cfg.log_dir);
	if (!realpath(path, dir))
		snprintf(dir, PATH_MAX, "%s", path);
}

/*
 * The render just started will have its "<machine>:<log file>" told to the
 * server in the agent's next transaction (runs.c, "Log reports"); one
 * longer than report_log takes (1024 characters) is not sent.
 */
static void
note_log(struct run *r, const struct booking *b, const char *machine, const char *dir)
{
	char		path[PATH_MAX],
				entry[PATH_MAX + 300];

	output_log_path(path, sizeof(path), dir, b);
	snprintf(entry, sizeof(entry), "%s:%s", machine, path);
	if (strlen(entry) <= 1024)
		runs_set_log(r, entry);
}

/*
 * Start each booking under a supervisor, with the deadline of the last
 * renewal: the bookings were made under the lease it holds; where
 * their output goes is told in the next transaction.
 */
static void
launch_bookings(struct booking *bs, int nb)
{
	char		machine[256],
				dir[PATH_MAX];

	if (speaks_run_log && nb > 0)
		log_place(machine, sizeof(machine), dir);
	for (int j = 0; j < nb; j++)
	{
		struct booking *b = &bs[j];
		struct launch l = {
			.b = b,
			.epoch = epoch,
			.state_dir = cfg.state_dir,
			.log_dir = cfg.log_dir,
			.work_dir = cfg.work_dir,
			.kill_grace_ns = grace_ns,
			.host = cfg.host,
			.cgroup_base = cgroup_base
		};
		struct run *r;

		log_event("booked", "proc=%" PRId64 " frame=%" PRId64 " job=%" PRId64 " layer=%" PRId64 " frame_number=%d cores=%s memory=%" PRId64 " gpus=%d epoch=%" PRId64,
				  b->proc, b->frame, b->job, b->layer, b->frame_number, b->cores,
				  b->memory, b->gpus, epoch);
		r = runs_launch(&l, lease_deadline);
		if (r && speaks_run_log)
			note_log(r, b, machine, dir);
		for (int k = 0; k < b->nenv; k++)
			free(b->env[k]);
		free(b->env);
	}
	/* the others' memory limits, once for all of these launches */
	runs_push_limits();
}

/*
 * Reserve what fits and launch it.  After a reserve that found nothing,
 * wait the reserve interval before asking again; after one that found
 * something, ask again at once, as there may be room for more.
 */
static void
do_reserve(void)
{
	struct pg_result *res;
	struct booking *bs;
	int			max_frames,
				nb;
	int64_t		now;

	if (!have_room(&max_frames))
		return;
	last_reserve_at = lease_clock_ns();
	if (!(res = call_reserve(max_frames)))
		return;
	now = lease_clock_ns();
	bs = bookings_from_answer(res, &nb);
	launch_bookings(bs, nb);
	free(bs);
	db_clear(res);
	next_reserve = nb > 0 ? now : now + SEC(cfg.reserve_interval);
}

/* the report window in force, while reports go in batches */
static int64_t
report_window_ns(void)
{
	return (int64_t) (cfg.report_window * 1000000.0);
}

/* do reports go in batches (complete_many), with the booking they make room for? */
static bool
batched(void)
{
	return speaks_batch && db_batch_taken();
}

/*
 * Send one batch of reports: "report what ended, book what fits, commit
 * once".  The log reports pending for the lease held (report_log, before
 * the completes: an ended run takes no log), complete_many for its
 * reports and, if the agent may book now and the batch is of the lease
 * held, the reserve() of the room they freed, in one round trip and one
 * transaction (db_exec_many), so that the booking can use what the
 * releases freed.  All or nothing: if the log reports fail, nothing
 * happened: they go again on their own, and the rest at once without
 * them; if the completes fail, they are tried again after a backoff; if
 * the booking fails, it took the completes with it, so they go again at
 * once, alone (a booking that keeps failing, e.g. for a lost lease, must
 * not hold up the reports); if the connection fails, whether it committed
 * is unknown: everything goes again after the reconnect (a report then
 * answered 'duplicate' if it had), and bookings the agent never saw are
 * never listed, so the server releases them.  False if the round must end
 * here and no other batch go now (no connection, a refused token, a
 * dropped answer).
 */
static bool
send_batch(struct report_batch *b)
{
	struct reserve_call rc;
	struct log_batch lb;
	struct db_stmt st[3];
	struct pg_result *res[3];
	const char *params[8],
			   *lparams[5];
	char		ep[32],
				lep[32];
	int			n = 0,
				li = -1,
				ci,
				ri = -1,
				max_frames,
				nb = 0;
	struct booking *bs = NULL;
	enum report_fault fault = runs_batch_fault(b, cfg.fault_drop_reports);
	bool		logs,
				go_on = true;

	if (fault == FAULT_BEFORE)
		return true;
	logs = b->epoch == epoch && take_logs(&lb);
	if (logs)
	{
		runs_logs_stmt(&lb, cfg.host, token, lep, sizeof(lep), lparams, &st[n]);
		li = n++;
	}
	runs_batch_stmt(b, cfg.host, token, ep, sizeof(ep), params, &st[n]);
	ci = n++;
	/* a dropped answer is the reports' fault only: it takes no booking with it */
	if (!b->alone && fault == FAULT_NONE && b->epoch == epoch && may_book(&max_frames))
	{
		reserve_stmt(&rc, max_frames);
		ri = n;
		st[n++] = rc.st;
		last_reserve_at = lease_clock_ns();
	}
	if (!db_exec_many(n, st, call_timeout_ms(), res))
		go_on = false;
	else if (fault == FAULT_AFTER)
	{
		runs_batch_discard(b, res[ci]);
		go_on = false;
	}
	else if (li >= 0 && !db_ok(res[li]))
	{
		logs_failed(&lb, res[li]);
		go_on = runs_batch_failed(b, NULL, "log", false) && !token_given_up;
	}
	else if (!db_ok(res[ci]))
	{
		(void) lease_error(res[ci]);
		go_on = runs_batch_failed(b, res[ci], "complete", false);
	}
	else if (ri >= 0 && !db_ok(res[ri]))
	{
		runs_batch_failed(b, NULL, "reserve", true);
		reserve_failed(res[ri]);
	}
	else
	{
		if (logs)
			runs_logs_done(&lb, res[li], "batch");
		if (ri >= 0)
			bs = bookings_from_answer(res[ri], &nb);
		runs_batch_answers(b, res[ci], ri >= 0 ? nb : -1);
		if (ri >= 0)
		{
			/* the room the ends freed is booked: no reserve of its own for it */
			(void) runs_take_ended();
			launch_bookings(bs, nb);
			next_reserve = lease_clock_ns() + (nb > 0 ? 0 : SEC(cfg.reserve_interval));
		}
	}
	free(bs);
	if (logs)
		runs_logs_free(&lb);
	for (int i = 0; i < n; i++)
		db_clear(res[i]);
	return go_on && db_connected();
}

/*
 * Send the batches that are due.  One that may have carried a booking ends
 * the round: the heartbeat may be due, and renders that ended meanwhile
 * are reaped by the main loop and go in the next batch.  False if the
 * connection was lost.
 */
static bool
send_batches(void)
{
	struct report_batch b;

	while (runs_batch_take(&b, phase == PH_ATTACH, report_window_ns()))
	{
		bool		alone = b.alone || b.epoch != epoch || phase != PH_RUNNING;
		bool		go_on = send_batch(&b);

		runs_batch_free(&b);
		if (!go_on || !alone)
			break;
	}
	return db_connected();
}

/*
 * A notification on the host's channel: a hint that a kill order may be
 * waiting, nothing more.  Anyone who can connect can send one, with any
 * payload, so nothing in it is acted on: the agent heartbeats (step()) and
 * acts on the kill orders in the answer.  Only the first of each gap is
 * logged, so a flood cannot flood the log either.
 */
static void
on_notify(const char *chan, const char *payload)
{
	char		shown[80];

	if (strcmp(chan, "frameq_ready") == 0)
	{
		/* work to book, perhaps: ask at once, or a gap after the last ask */
		int64_t		soon = last_reserve_at + HINT_GAP_NS;

		if (soon < next_reserve)
			next_reserve = soon;
		return;
	}
	if (!channel[0] || strcmp(chan, channel) != 0)
		return;
	hint_count++;
	if (hint_pending)
		return;
	hint_pending = true;
	snprintf(shown, sizeof(shown), "%s", payload ? payload : "");
	log_event("kill-hint", "channel=%s payload=\"%s\" message=\"a hint only: heartbeating to learn the kill orders\"",
			  chan, log_clean(shown));
}

/* when the hint heartbeat may go out; INT64_MAX if none is due */
static int64_t
hint_time(void)
{
	if (!hint_pending || phase != PH_RUNNING || token_given_up)
		return INT64_MAX;
	return hint_beat_at + HINT_GAP_NS;
}

static void
do_reload(void)
{
	struct config n;
	char		err[1024];
	char	   *t;
	bool		reconnect = false;

	reload_requested = false;
	if (config_load(&n, saved_argc, saved_argv, err, sizeof(err)) != 0)
	{
		log_event("reload-failed", "error=\"%s\"", err);
		config_free(&n);
		return;
	}
	if (strcmp(n.host, cfg.host) != 0 || strcmp(n.state_dir, cfg.state_dir) != 0)
	{
		log_event("warning", "message=\"host and state-dir change only with a restart; keeping %s and %s\"",
				  cfg.host, cfg.state_dir);
		free(n.host);
		n.host = strdup(cfg.host);
		free(n.state_dir);
		n.state_dir = strdup(cfg.state_dir);
	}
	t = config_read_token(n.token_file, err, sizeof(err));
	if (!t)
	{
		log_event("reload-failed", "error=\"%s\"", err);
		config_free(&n);
		return;
	}
	if (strcmp(t, token) != 0 || strcmp(n.conninfo, cfg.conninfo) != 0)
		reconnect = true;
	free(token);
	token = t;
	if (token_given_up)
	{
		log_event("token-reread", "file=%s result=reloaded message=\"SIGHUP: trying the token in the file again\"",
				  n.token_file);
		token_given_up = false;
		next_heartbeat = 0;
	}
	config_free(&cfg);
	cfg = n;
	update_grace();
	log_event("reloaded", "config=%s", cfg.config_file[0] ? cfg.config_file : "-");
	compute_offer();
	warn_faults();
	if (mkdir_p(cfg.log_dir, 0755) != 0)
		log_event("warning", "message=\"cannot create log dir %s: %s\"", cfg.log_dir, strerror(errno));
	if (reconnect)
		db_disconnect("connection settings reloaded");
	next_reserve = 0;
}

static void
handle_signals(void)
{
	struct signalfd_siginfo si;

	while (read(sigfd, &si, sizeof(si)) == sizeof(si))
	{
		switch (si.ssi_signo)
		{
			case SIGTERM:
			case SIGINT:
				if (!stopping)
				{
					stopping = true;
					stop_kill = cfg.kill_on_term;
					log_event("stopping", "signal=%s mode=%s running=%d",
							  si.ssi_signo == SIGTERM ? "TERM" : "INT",
							  stop_kill ? "kill" : "finish", runs_alive());
				}
				else if (!stop_kill)
				{
					stop_kill = true;
					log_event("stopping", "signal=%s mode=kill running=%d",
							  si.ssi_signo == SIGTERM ? "TERM" : "INT", runs_alive());
				}
				if (stop_kill)
					runs_kill_all(WHY_SHUTDOWN, "agent stopping");
				break;
			case SIGHUP:
				reload_requested = true;
				break;
			default:
				break;
		}
	}
}

static int64_t
connect_backoff(void)
{
	int64_t		b = 100000000LL << (connect_failures < 5 ? connect_failures : 5);
	int64_t		cap = SEC(2);

	if (lease_ttl > 0 && SEC(lease_ttl / 6) < cap)
		cap = SEC(lease_ttl / 6);
	return b < cap ? b : cap;
}

/*
 * Renders of an earlier agent or of a lost lease are still being killed:
 * nothing may be attached until they are dead, so say (every 5 s) what the
 * agent waits for.  True while any is alive.
 */
static bool
waiting_for_renders(const char *reason, int64_t now)
{
	if (runs_alive() == 0)
		return false;
	if (now - last_wait_log > SEC(5))
	{
		log_event("waiting", "reason=\"%s\" alive=%d", reason, runs_alive());
		last_wait_log = now;
	}
	return true;
}

/*
 * Connect if not connected, with a growing pause between failures.  A new
 * connection has no LISTEN yet (listen_if_needed() gives it one), and it
 * may reach another server (a failover), whose database's frameq must be
 * one the agent speaks.  True if connected.
 */
static bool
connect_if_needed(int64_t now)
{
	if (db_connected())
		return true;
	if (now < next_connect)
		return false;
	if (!db_connect(cfg.conninfo, cfg.host))
	{
		connect_failures++;
		next_connect = lease_clock_ns() + connect_backoff();
		return false;
	}
	connect_failures = 0;
	listening = false;
	return extension_spoken();
}

/*
 * The reports of ended renders go before any other call.  Before an
 * attach, all of them at once: an earlier epoch's finished render counts
 * only while its proc is still live, and the attach ends that.  False if
 * the round must end here (no connection, or a refused token).
 */
static bool
send_reports(void)
{
	/* one complete() per end: an ended run takes no log, so tell it first */
	if (!batched() && runs_pending_reports() > 0 && runs_logs_pending())
		send_logs();
	if (batched() ? !send_batches() :
		!runs_send_reports(cfg.host, token, phase == PH_ATTACH, call_timeout_ms(),
						   cfg.fault_drop_reports, reports_taken()))
		return false;
	/* 28P01: re-read the token file; the reports go out again next round */
	if (runs_take_token_refused())
	{
		token_refused("complete");
		return false;
	}
	return true;
}

/*
 * Without a lease, attach once the renders of the lost one are dead and the
 * database's frameq (which ALTER EXTENSION may have changed since the
 * connect) is one the agent speaks.  True if a lease is held.
 */
static bool
attach_if_needed(int64_t now)
{
	if (phase == PH_LEASE_LOST)
	{
		if (waiting_for_renders("renders of the lost lease are being killed", now))
			return false;
		phase = PH_ATTACH;
		next_heartbeat = 0;
	}
	if (phase != PH_ATTACH)
		return true;
	if (stopping || now < next_heartbeat)
		return false;
	if (!db_reread_extension_version(call_timeout_ms()))
	{
		next_heartbeat = lease_clock_ns() + SEC(1);
		return false;
	}
	return extension_spoken() && do_attach();
}

/*
 * LISTEN on the host's channel once per connection.  If that fails, kill
 * orders still come with every heartbeat, so the agent goes on, and tries
 * again after the next reconnect.  False if the connection was lost.
 */
static bool
listen_if_needed(void)
{
	bool		ok;

	if (listening || !channel[0])
		return true;
	ok = db_listen(channel) && db_listen("frameq_ready");
	if (!db_connected())
		return false;
	listening = true;
	if (ok)
		log_event("listening", "channel=%s ready=frameq_ready", channel);
	return true;
}

/*
 * Holding a lease: renew it when due (at once after a hint, twice at the
 * end of a shutdown), book while there is room, and tell where renders'
 * output is if no transaction has taken it in time.
 */
static void
hold_lease(void)
{
	if (!listen_if_needed())
		return;
	if (stopping && runs_alive() == 0 && runs_pending_reports() == 0 && final_beats < 2)
	{
		/*
		 * Two heartbeats that list nothing: the second releases even a
		 * booking made after the last regular heartbeat (a proc counts as
		 * seen once a heartbeat came after its booking).
		 */
		if (!do_heartbeat())
			return;
		final_beats++;
		return;
	}
	if (lease_clock_ns() >= hint_time())
	{
		hint_beat_at = lease_clock_ns();
		if (!do_heartbeat())
			return;
	}
	if (lease_clock_ns() >= next_heartbeat && !do_heartbeat())
		return;
	if (phase != PH_RUNNING)
		return;
	if (!stopping)
	{
		note_launch_error();
		/* room again: ask at once */
		if (runs_take_ended())
			next_reserve = 0;
		if (lease_clock_ns() >= reserve_time())
			do_reserve();
	}
	/* log reports that no transaction took in time go on their own */
	if (lease_clock_ns() >= log_time())
		send_logs();
}

/*
 * One round of talking to the database: returns when it has nothing to do.
 * Each step below returns false when the round must end there.
 */
static void
step(void)
{
	int64_t		now = lease_clock_ns();

	if (phase == PH_RECOVER)
	{
		if (waiting_for_renders("an earlier agent's renders are being killed", now))
			return;
		phase = PH_ATTACH;
	}

	/* a frameq this agent does not speak: no more calls (main() exits) */
	if (version_refused)
		return;
	if (!connect_if_needed(now))
		return;

	/* a refused token: nothing until the file holds another one */
	if (token_given_up)
	{
		token_check();
		if (token_given_up)
			return;
	}

	if (!send_reports())
		return;
	if (!attach_if_needed(now))
		return;
	hold_lease();
}

static bool
shutdown_done(void)
{
	int64_t		now = lease_clock_ns();

	if (runs_alive() > 0)
		return false;
	if (stop_give_up == 0)
		stop_give_up = now + SEC(lease_ttl * 2 > 10 ? lease_ttl * 2 : 10);
	if (runs_pending_reports() == 0 && (final_beats >= 2 || phase != PH_RUNNING))
		return true;
	if (now >= stop_give_up)
	{
		log_event("warning", "message=\"could not report everything before stopping: %d report(s) stay in %s for the next start\"",
				  runs_pending_reports(), cfg.state_dir);
		if (runs_pending_reports() > 0)
			exit_code = 1;
		return true;
	}
	return false;
}

static void
wait_events(void)
{
	int64_t		now = lease_clock_ns();
	int64_t		wake = now + NS_PER_SEC;
	struct pollfd pfd[2];
	int			np = 0;

	if (token_given_up)
	{
		if (next_token_check < wake)
			wake = next_token_check;
	}
	else if (version_refused)
	{
		/* no more calls: only renders to wait for */
	}
	else if (!db_connected())
	{
		if (next_connect < wake)
			wake = next_connect;
	}
	else
	{
		int64_t		report_at = runs_next_report(batched() ? report_window_ns() : 0);

		if ((phase == PH_RUNNING || phase == PH_ATTACH) && next_heartbeat < wake)
			wake = next_heartbeat;
		if (hint_time() < wake)
			wake = hint_time();
		if (reserve_time() < wake)
			wake = reserve_time();
		if (report_at < wake)
			wake = report_at;
		if (log_time() < wake)
			wake = log_time();
	}
	if (runs_next_poll() < wake)
		wake = runs_next_poll();
	if (phase == PH_RECOVER || phase == PH_LEASE_LOST || stopping)
		wake = wake < now + 100000000 ? wake : now + 100000000;

	pfd[np].fd = sigfd;
	pfd[np].events = POLLIN;
	np++;
	if (db_connected())
	{
		pfd[np].fd = db_socket();
		pfd[np].events = POLLIN;
		np++;
	}
	if (wake <= now)
		wake = now;
	if (poll(pfd, (nfds_t) np, (int) ((wake - now + 999999) / 1000000)) > 0 &&
		np > 1 && (pfd[1].revents & (POLLIN | POLLHUP | POLLERR)))
		db_consume();
}

/*
 * The state directory is only good for this boot: after a crash of the
 * machine its renders are dead (attach() with the new boot id releases
 * their procs), and a result written just before the crash may describe
 * output that never reached the disk.  So a directory from another boot is
 * emptied, not reported.
 */
static void
forget_other_boots(void)
{
	char		path[PATH_MAX],
				old[256] = "";
	int			fd;
	ssize_t		n;

	snprintf(path, sizeof(path), "%s/boot_id", cfg.state_dir);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0)
	{
		n = read(fd, old, sizeof(old) - 1);
		old[n > 0 ? n : 0] = '\0';
		close(fd);
		old[strcspn(old, "\r\n")] = '\0';
	}
	if (old[0] && strcmp(old, boot_id) != 0)
	{
		int64_t    *procs;
		int			np = state_list(cfg.state_dir, &procs);

		log_event("state-discarded", "runs=%d reason=\"the state directory is from an earlier boot (%s)\"",
				  np, old);
		for (int i = 0; i < np; i++)
			state_remove(cfg.state_dir, procs[i]);
		free(procs);
	}
	if (strcmp(old, boot_id) != 0)
	{
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0 || write(fd, boot_id, strlen(boot_id)) < 0 || close(fd) != 0)
			log_event("warning", "message=\"cannot write %s: %s\"", path, strerror(errno));
	}
}

/*
 * Create the state and log directories and lock the state directory for
 * this agent's whole life: two agents sharing one would each take the
 * other's renders for leftovers and kill them.  The lock's descriptor is
 * never closed (the supervisors close their copy).  False, with the
 * reason on stderr, if either fails.
 */
static bool
take_state_dir(void)
{
	char		lockpath[PATH_MAX];
	int			lockfd;

	if (mkdir_p(cfg.state_dir, 0700) != 0 || mkdir_p(cfg.log_dir, 0755) != 0)
	{
		fprintf(stderr, "frameq-agent: cannot create %s or %s: %s\n",
				cfg.state_dir, cfg.log_dir, strerror(errno));
		return false;
	}
	snprintf(lockpath, sizeof(lockpath), "%s/agent.lock", cfg.state_dir);
	lockfd = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lockfd < 0 || flock(lockfd, LOCK_EX | LOCK_NB) != 0)
	{
		fprintf(stderr, "frameq-agent: another agent is using %s\n", cfg.state_dir);
		return false;
	}
	return true;
}

/*
 * Take the signals the agent acts on through sigfd, so that the main loop
 * handles them between rounds and never inside a handler.  False if there
 * is no signalfd.
 */
static bool
open_sigfd(void)
{
	sigset_t	mask;

	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGCHLD);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sigfd < 0)
	{
		perror("frameq-agent: signalfd");
		return false;
	}
	return true;
}

int
main(int argc, char **argv)
{
	char		err[1024];
	int			rc;

	saved_argc = argc;
	saved_argv = argv;
	signal(SIGPIPE, SIG_IGN);

	rc = config_load(&cfg, argc, argv, err, sizeof(err));
	if (rc == 1)
		return 0;
	if (rc < 0)
	{
		fprintf(stderr, "frameq-agent: %s\n", err);
		return 2;
	}
	if (!(token = config_read_token(cfg.token_file, err, sizeof(err))))
	{
		fprintf(stderr, "frameq-agent: %s\n", err);
		log_event("refused", "error=\"%s\"", err);
		return 2;
	}
	if (!take_state_dir())
		return 2;
	read_boot_id();
	if (!open_sigfd())
		return 2;

	log_event("start", "version=%s host=%s pid=%d state_dir=%s log_dir=%s work_dir=%s kill_grace=%.2fs on_term=%s config=%s",
			  AGENT_VERSION, cfg.host, (int) getpid(), cfg.state_dir, cfg.log_dir,
			  cfg.work_dir, cfg.kill_grace, cfg.kill_on_term ? "kill" : "finish",
			  cfg.config_file[0] ? cfg.config_file : "-");
	resources_detect(&machine);
	compute_offer();
	choose_memory_watch();
	warn_faults();
	update_grace();
	runs_set_state_dir(cfg.state_dir);
	forget_other_boots();
	runs_adopt_leftovers(cfg.state_dir);
	db_set_notify_handler(on_notify);

	for (;;)
	{
		handle_signals();
		if (reload_requested)
			do_reload();
		runs_reap(grace_ns);
		step();
		runs_reap(grace_ns);
		if (stopping && shutdown_done())
			break;
		if (version_refused && runs_alive() == 0)
		{
			exit_code = EXIT_VERSION;
			break;
		}
		runs_push_limits();
		wait_events();
	}
	db_disconnect("stopped");
	log_event("stopped", "exit_status=%d", exit_code);
	return exit_code;
}
