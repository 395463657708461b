/*
 * runs.c: the bookings on this machine, from launch to acknowledged report.
 *
 * A run is live while its supervisor (or, if the supervisor died, anything
 * of its render's process group) is alive; every live run is listed in
 * heartbeats, whatever its epoch, because its process may still run.  When
 * it has ended, the supervisor's result decides what the database hears:
 *
 *   - it ended on its own, was killed on the database's kill order, or was
 *     killed by its supervisor for using more memory than it may:
 *     complete() with its exit status (and, from frameq 0.5.0, whether it
 *     was an OOM), retried until acknowledged (the run stays listed in
 *     heartbeats until then, so a heartbeat cannot release it as lost while
 *     its report is on the way);
 *   - it was killed because the lease was lost, at shutdown (--kill-on-term)
 *     or as an earlier agent's leftover, or fenced by its supervisor: no
 *     report.  These are the agent's doing, not the frame's failure, so they
 *     must not use up a retry; the next heartbeats no longer list the proc
 *     and the server releases it (lost_by_agent, or killed for a kill order),
 *     or the lease expiry or attach() does.
 *
 * The state directory mirrors the table (statefile.c), so that an agent that
 * died can be followed by one that knows what ran.
 *
 * Reports in batches (frameq 0.6.0, complete_many): a report waits up to
 * the report window (--report-window) for other renders of the host to
 * end, unless none is running; then every pending report of its epoch goes
 * in one complete_many call, which main.c sends in one transaction with
 * the reserve() of the room they freed.  Renders that end while a report
 * is in flight are reaped after its answer and go in the next batch.  Each
 * element's answer is taken exactly as a single complete()'s.  If the
 * transaction fails, none of it happened: the reports stay pending (with a
 * backoff if the completes failed; at once, and without a booking, if the
 * booking failed and took them with it), and a lost answer is sent again
 * and answers 'duplicate'.
 *
 * Log reports (frameq 0.6.0, report_log): where a render's output is
 * waits, from its launch, for the agent's next transaction that can take
 * it: a batch of reports (before its complete_many, since report_log
 * leaves an ended run alone), or a reserve of its own; after
 * LOG_REPORT_WAIT_NS without one it goes in a transaction of its own.
 * Every log report pending for the lease held goes in one statement.  If
 * the transaction fails, they stay pending with the rest; if the
 * report_log statement itself failed, they go again at once on their own,
 * and an error there drops them (the log is only a help).
 *
 * Each supervisor gets, with every deadline, the most memory its render's
 * tree may use: its booking plus the host's unbooked memory (the memory
 * the host offers less the bookings of every render alive now).  It
 * changes whenever a render starts or ends, and goes out then too.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"

/* how long a supervisor may take to die after SIGTERM before it gets SIGKILL */
#define SUPERVISOR_SLACK_NS (3 * NS_PER_SEC)

struct run
{
	struct run *next;
	struct booking b;
	int64_t		epoch;
	int64_t		started_ns;

	pid_t		sup_pid;
	unsigned long long sup_start;
	pid_t		render_pid;
	bool		child;			/* our child: waitpid() tells when it ends */
	bool		leftover;		/* an earlier agent's */
	int			pipe_fd;		/* deadlines to the supervisor; -1 if none */
	int64_t		sent_limit;		/* the memory limit it was last sent */
	bool		sup_alive;
	bool		sup_killed;		/* SIGKILL sent to a supervisor that would not die */

	/* the supervisor died without a result: its render's group may live on */
	bool		orphan;
	int64_t		orphan_term_at;
	bool		orphan_killed;

	enum kill_why why;
	int64_t		kill_sent_at;

	bool		no_result;		/* the supervisor died without writing one */
	struct result_record res;

	bool		report;			/* complete() not yet acknowledged */
	int64_t		next_report;
	int			report_tries;
	int64_t		ended_ns;		/* when its end was seen: the report window's start */
	bool		alone;			/* its next report goes without a booking */

	char	   *log_entry;		/* report_log's log, not yet taken; NULL if none */
	bool		log_alone;		/* it goes at once, in a transaction of its own */

	struct output out;			/* its log file, for the heartbeat's report */
};

static struct run *runs;
static char *state_dir;
static int64_t host_memory;		/* what the limits are computed from; <= 0 none */
static struct lease_msg last_msg = {.memory_limit = -1};	/* the last deadline sent */
static bool limits_changed;		/* a render started or ended since the last push */
static bool launch_error;
static bool ended_flag;
static bool token_refused_flag;

void
runs_set_state_dir(const char *dir)
{
	free(state_dir);
	state_dir = strdup(dir);
}

bool
runs_take_launch_error(void)
{
	bool		r = launch_error;

	launch_error = false;
	return r;
}

bool
runs_take_token_refused(void)
{
	bool		r = token_refused_flag;

	token_refused_flag = false;
	return r;
}

bool
runs_take_ended(void)
{
	bool		r = ended_flag;

	ended_flag = false;
	return r;
}

static const char *
why_name(enum kill_why w)
{
	switch (w)
	{
		case WHY_NONE:
			return "none";
		case WHY_ORDER:
			return "kill-order";
		case WHY_LEASE:
			return "lease-lost";
		case WHY_SHUTDOWN:
			return "shutdown";
		case WHY_LEFTOVER:
			return "leftover";
	}
	return "none";
}

static bool
is_live(const struct run *r)
{
	return r->sup_alive || r->orphan;
}

static void
free_run(struct run *r)
{
	if (r->pipe_fd >= 0)
		close(r->pipe_fd);
	free(r->b.command);
	free(r->b.progress_pattern);
	for (int i = 0; i < r->b.nenv; i++)
		free(r->b.env[i]);
	free(r->b.env);
	output_free(&r->out);
	free(r->log_entry);
	free(r);
}

static void
drop(struct run *r)
{
	struct run **pp;

	state_remove(state_dir, r->b.proc);
	for (pp = &runs; *pp; pp = &(*pp)->next)
		if (*pp == r)
		{
			*pp = r->next;
			break;
		}
	free_run(r);
	ended_flag = true;
}

/* the memory booked by every render alive now */
static int64_t
booked_memory(void)
{
	int64_t		booked = 0;

	for (const struct run *o = runs; o; o = o->next)
		if (is_live(o))
			booked += o->b.memory;
	return booked;
}

/*
 * The most memory r's tree may use: its booking plus what the host offers
 * beyond the bookings of every render alive now (booked_memory(), never
 * less than nothing); -1 when limits are off.
 */
static int64_t
limit_of(const struct run *r, int64_t booked)
{
	if (host_memory <= 0)
		return -1;
	return r->b.memory + (host_memory > booked ? host_memory - booked : 0);
}

static int64_t
memory_limit(const struct run *r)
{
	return limit_of(r, booked_memory());
}

/*
 * The last deadline, with each run's memory limit as it stands now, to
 * every supervisor (all), or only to those whose limit is not the one they
 * were last sent (a render started or ended: runs_push_limits).  A full
 * pipe (a supervisor that does not read) loses this one; it still has the
 * previous deadline, which is the safe side, and a limit not sent is sent
 * again with the next push.  Before the first renewal there is no deadline
 * to send.
 */
static void
push(bool all)
{
	int64_t		booked = booked_memory();

	if (last_msg.deadline_ns == 0)
		return;
	for (struct run *r = runs; r; r = r->next)
	{
		struct lease_msg msg = last_msg;

		if (r->pipe_fd < 0)
			continue;
		msg.memory_limit = limit_of(r, booked);
		if (!all && msg.memory_limit == r->sent_limit)
			continue;
		if (write(r->pipe_fd, &msg, sizeof(msg)) == sizeof(msg))
			r->sent_limit = msg.memory_limit;
		else if (errno == EPIPE)
		{
			close(r->pipe_fd);
			r->pipe_fd = -1;
		}
	}
}

/*
 * The limits after the renders that started or ended since the last push:
 * once for all of them (a batch of ends and the launches of its bookings
 * would otherwise wake every supervisor once for each), and only to the
 * supervisors whose limit moved.  Called after each reaping and each
 * launch of bookings, so that no limit waits for a database round trip.
 */
void
runs_push_limits(void)
{
	if (!limits_changed)
		return;
	limits_changed = false;
	push(false);
}

static struct run *
find(int64_t proc)
{
	for (struct run *r = runs; r; r = r->next)
		if (r->b.proc == proc)
			return r;
	return NULL;
}

/* the render has ended (r->res is set): report it or let the server release it */
static void
finalize(struct run *r)
{
	double		secs = r->started_ns ?
		(double) (lease_clock_ns() - r->started_ns) / NS_PER_SEC : 0;
	bool		report;

	ended_flag = true;
	if (r->res.killed_by == KILLED_NONE)
		log_event("finished", "proc=%" PRId64 " frame=%" PRId64 " exit_status=%d exit_signal=%d max_rss=%" PRId64 " oom=%s seconds=%.3f%s",
				  r->b.proc, r->b.frame, r->res.exit_status, r->res.exit_signal,
				  r->res.max_rss, r->res.oom ? "yes" : "no", secs,
				  r->leftover ? " leftover=yes" : "");
	else if (r->no_result)
		log_event("lost", "proc=%" PRId64 " frame=%" PRId64 " reason=\"its supervisor died without a result; the render is dead\"",
				  r->b.proc, r->b.frame);
	else if (r->res.killed_by == KILLED_ERROR)
	{
		log_event("not-run", "proc=%" PRId64 " frame=%" PRId64 " reason=\"the render could not be started\"",
				  r->b.proc, r->b.frame);
		if (!r->leftover)
			launch_error = true;
	}
	else
		log_event("killed", "proc=%" PRId64 " frame=%" PRId64 " by=%s why=%s exit_signal=%d max_rss=%" PRId64 " oom=%s seconds=%.3f%s",
				  r->b.proc, r->b.frame, killed_by_name(r->res.killed_by),
				  r->res.killed_by == KILLED_MEMORY ? "memory" : why_name(r->why),
				  r->res.exit_signal, r->res.max_rss, r->res.oom ? "yes" : "no", secs,
				  r->leftover ? " leftover=yes" : "");

	/* the limits of the others grow by what this one had booked */
	limits_changed = true;
	report = r->res.killed_by == KILLED_NONE || r->res.killed_by == KILLED_MEMORY ||
		(r->res.killed_by == KILLED_AGENT && r->why == WHY_ORDER);
	if (!report)
	{
		drop(r);
		return;
	}
	r->report = true;
	r->next_report = 0;
	r->ended_ns = lease_clock_ns();
}

static void
supervisor_gone(struct run *r)
{
	struct run_record rec;

	r->sup_alive = false;
	if (r->pipe_fd >= 0)
	{
		close(r->pipe_fd);
		r->pipe_fd = -1;
	}
	if (state_read_result(state_dir, r->b.proc, &r->res) == 0)
	{
		finalize(r);
		return;
	}
	/* no result: the supervisor was killed; its render may still be running */
	if (r->render_pid == 0 && state_read_run(state_dir, r->b.proc, &rec) == 0)
		r->render_pid = rec.render_pid;
	memset(&r->res, 0, sizeof(r->res));
	r->res.proc = r->b.proc;
	r->res.epoch = r->epoch;
	r->res.killed_by = KILLED_ERROR;
	r->no_result = true;
	if (r->render_pid > 0 && group_alive(r->render_pid, r->sup_pid))
	{
		log_event("orphan-render", "proc=%" PRId64 " pid=%d reason=\"its supervisor died; killing the render\"",
				  r->b.proc, (int) r->render_pid);
		group_signal(r->render_pid, r->sup_pid, SIGTERM);
		group_signal(r->render_pid, r->sup_pid, SIGCONT);
		r->orphan = true;
		r->orphan_term_at = lease_clock_ns();
		return;
	}
	finalize(r);
}

/* A new run for the booking, its own copy, first in the table. */
static struct run *
new_run(const struct launch *l)
{
	struct run *r = calloc(1, sizeof(*r));
	char		path[PATH_MAX];

	r->b = *l->b;
	r->b.command = strdup(l->b->command);
	r->b.progress_pattern = l->b->progress_pattern ? strdup(l->b->progress_pattern) : NULL;
	output_log_path(path, sizeof(path), l->log_dir, l->b);
	output_init(&r->out, path, r->b.progress_pattern, r->b.proc);
	r->b.env = calloc((size_t) l->b->nenv + 1, sizeof(char *));
	for (int i = 0; i < l->b->nenv; i++)
		r->b.env[i] = strdup(l->b->env[i]);
	r->epoch = l->epoch;
	r->pipe_fd = -1;
	r->child = true;
	r->started_ns = lease_clock_ns();
	r->next = runs;
	runs = r;
	return r;
}

/*
 * Fork the run's supervisor, with a pipe for its deadlines.  False if
 * there is none (nothing was started).
 */
static bool
start_supervisor(struct run *r, const struct launch *l)
{
	int			fds[2];
	pid_t		pid;

	if (pipe2(fds, O_CLOEXEC) != 0)
	{
		log_event("launch-error", "proc=%" PRId64 " error=\"pipe: %s\"", r->b.proc, strerror(errno));
		return false;
	}
	fflush(NULL);
	pid = fork();
	if (pid < 0)
	{
		log_event("launch-error", "proc=%" PRId64 " error=\"fork: %s\"", r->b.proc, strerror(errno));
		close(fds[0]);
		close(fds[1]);
		return false;
	}
	if (pid == 0)
	{
		struct launch mine = *l;

		/*
		 * Keep stdio and the pipe, close everything else of the agent's (its
		 * database socket, its lock on the state directory, the other
		 * supervisors' pipes) without touching it: no libpq call here.
		 */
		mine.b = &r->b;
		if (fds[0] != 3 && dup2(fds[0], 3) < 0)
			_exit(1);
		close_range(4, ~0U, 0);
		supervisor_main(&mine, 3);
	}
	close(fds[0]);
	r->pipe_fd = fds[1];
	fcntl(r->pipe_fd, F_SETFL, fcntl(r->pipe_fd, F_GETFL) | O_NONBLOCK);
	r->sup_pid = pid;
	r->sup_alive = true;
	proc_start_time(pid, &r->sup_start);
	return true;
}

/*
 * Record the run in the state directory before anything runs: a later
 * agent must find every render.  False if it could not be written.
 */
static bool
record_run(const struct run *r)
{
	struct run_record rec;

	memset(&rec, 0, sizeof(rec));
	rec.proc = r->b.proc;
	rec.epoch = r->epoch;
	rec.frame = r->b.frame;
	rec.job = r->b.job;
	rec.layer = r->b.layer;
	rec.frame_number = r->b.frame_number;
	rec.sup_pid = r->sup_pid;
	rec.sup_start = r->sup_start;
	if (state_write_run(state_dir, &rec) == 0)
		return true;
	log_event("launch-error", "proc=%" PRId64 " error=\"cannot write the state file in %s: %s\"",
			  r->b.proc, state_dir, strerror(errno));
	return false;
}

/*
 * The go, and the first deadline: the supervisor starts the render on it.
 * False if the supervisor could not be reached.
 */
static bool
send_go(struct run *r, int64_t deadline_ns, int64_t grace_ns)
{
	struct lease_msg msg = {
		.deadline_ns = deadline_ns,
		.grace_ns = grace_ns,
		.memory_limit = memory_limit(r)
	};

	r->sent_limit = msg.memory_limit;
	if (write(r->pipe_fd, &msg, sizeof(msg)) == sizeof(msg))
		return true;
	log_event("launch-error", "proc=%" PRId64 " error=\"cannot reach the supervisor: %s\"",
			  r->b.proc, strerror(errno));
	return false;
}

/*
 * Launch a booking: a supervisor, its state file, then its go.  A
 * supervisor that gets no go sees end of file on its pipe and exits
 * without starting the render; the launch error makes the agent hold off
 * reserving, since a host that cannot start renders would only churn.
 */
struct run *
runs_launch(const struct launch *l, int64_t deadline_ns)
{
	struct run *r = new_run(l);

	if (!start_supervisor(r, l))
	{
		/* nothing was started: the run ends at once, as not run */
		memset(&r->res, 0, sizeof(r->res));
		r->res.proc = r->b.proc;
		r->res.killed_by = KILLED_ERROR;
		finalize(r);
		return NULL;
	}
	if (!record_run(r) || !send_go(r, deadline_ns, l->kill_grace_ns))
	{
		close(r->pipe_fd);
		r->pipe_fd = -1;
		launch_error = true;
	}
	/* the others' limits shrink by what this one booked (runs_push_limits) */
	limits_changed = true;
	return r;
}

static void
kill_run(struct run *r, enum kill_why why, const char *reason)
{
	if (!is_live(r) || r->why != WHY_NONE)
		return;
	r->why = why;
	r->kill_sent_at = lease_clock_ns();
	log_event("killing", "proc=%" PRId64 " frame=%" PRId64 " why=%s reason=\"%s\"",
			  r->b.proc, r->b.frame, why_name(why), log_clean(reason));
	if (r->sup_alive)
	{
		/* a leftover is not our child: make sure the pid is still its */
		if (r->child || proc_alive(r->sup_pid, r->sup_start))
			kill(r->sup_pid, SIGTERM);
	}
}

void
runs_kill(int64_t proc, enum kill_why why, const char *reason)
{
	struct run *r = find(proc);

	if (r)
		kill_run(r, why, reason);
}

void
runs_kill_all(enum kill_why why, const char *reason)
{
	for (struct run *r = runs; r; r = r->next)
		kill_run(r, why, reason);
}

void
runs_push_deadline(int64_t deadline_ns, int64_t grace_ns)
{
	last_msg.deadline_ns = deadline_ns;
	last_msg.grace_ns = grace_ns;
	push(true);
}

void
runs_set_host_memory(int64_t bytes)
{
	host_memory = bytes;
	push(true);
}

char *
runs_report(bool utf8, int *entries)
{
	size_t		len = 0,
				cap = 256;
	char	   *s = malloc(cap);

	*entries = 0;
	s[len++] = '[';
	s[len] = '\0';
	for (struct run *r = runs; r; r = r->next)
		if (is_live(r) && !r->leftover && r->out.path &&
			output_report(&r->out, r->b.proc, utf8, &s, &len, &cap))
			(*entries)++;
	if (*entries == 0)
	{
		free(s);
		return NULL;
	}
	s = realloc(s, len + 2);
	s[len++] = ']';
	s[len] = '\0';
	return s;
}

void
runs_reap(int64_t kill_grace_ns)
{
	pid_t		pid;
	int			status;
	int64_t		now = lease_clock_ns();
	struct run *r,
			   *next;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
	{
		for (r = runs; r; r = r->next)
			if (r->child && r->sup_alive && r->sup_pid == pid)
			{
				supervisor_gone(r);
				break;
			}
	}

	for (r = runs; r; r = next)
	{
		next = r->next;
		if (r->sup_alive && !r->child && !proc_alive(r->sup_pid, r->sup_start))
		{
			supervisor_gone(r);
			continue;
		}
		if (r->sup_alive && r->kill_sent_at && !r->sup_killed &&
			now > r->kill_sent_at + kill_grace_ns + SUPERVISOR_SLACK_NS &&
			(r->child || proc_alive(r->sup_pid, r->sup_start)))
		{
			/* it should have killed its render by now: take over */
			log_event("supervisor-stuck", "proc=%" PRId64 " supervisor=%d reason=\"did not end after the kill; SIGKILL\"",
					  r->b.proc, (int) r->sup_pid);
			kill(r->sup_pid, SIGKILL);
			r->sup_killed = true;
			continue;
		}
		if (r->orphan)
		{
			if (!group_alive(r->render_pid, r->sup_pid))
			{
				r->orphan = false;
				finalize(r);
			}
			else if (!r->orphan_killed && now >= r->orphan_term_at + kill_grace_ns)
			{
				group_signal(r->render_pid, r->sup_pid, SIGKILL);
				r->orphan_killed = true;
			}
		}
	}
	/* the limits after what ended here (and what was launched since) */
	runs_push_limits();
}

void
runs_adopt_leftovers(const char *dir)
{
	int64_t    *procs;
	int			n = state_list(dir, &procs);

	for (int i = 0; i < n; i++)
	{
		struct run_record rec;
		struct run *r;

		if (find(procs[i]))
			continue;
		if (state_read_run(dir, procs[i], &rec) != 0)
		{
			log_event("leftover", "proc=%" PRId64 " reason=\"unreadable state file; removed\"", procs[i]);
			state_remove(dir, procs[i]);
			continue;
		}
		r = calloc(1, sizeof(*r));
		r->b.proc = rec.proc;
		r->b.frame = rec.frame;
		r->b.job = rec.job;
		r->b.layer = rec.layer;
		r->b.frame_number = rec.frame_number;
		r->b.command = strdup("");
		r->b.env = calloc(1, sizeof(char *));
		r->epoch = rec.epoch;
		r->sup_pid = rec.sup_pid;
		r->sup_start = rec.sup_start;
		r->render_pid = rec.render_pid;
		r->leftover = true;
		r->pipe_fd = -1;
		r->next = runs;
		runs = r;

		if (state_read_result(dir, rec.proc, &r->res) == 0)
		{
			/* it ended while no agent was looking: report it if it may be */
			r->why = WHY_LEFTOVER;
			finalize(r);
			continue;
		}
		if (proc_alive(rec.sup_pid, rec.sup_start))
		{
			r->sup_alive = true;
			log_event("leftover", "proc=%" PRId64 " frame=%" PRId64 " epoch=%" PRId64 " supervisor=%d render=%d reason=\"an earlier agent's render: killing it before attaching\"",
					  rec.proc, rec.frame, rec.epoch, (int) rec.sup_pid, (int) rec.render_pid);
			kill_run(r, WHY_LEFTOVER, "left by an earlier agent");
			continue;
		}
		log_event("leftover", "proc=%" PRId64 " frame=%" PRId64 " epoch=%" PRId64 " reason=\"its supervisor is gone\"",
				  rec.proc, rec.frame, rec.epoch);
		r->why = WHY_LEFTOVER;
		supervisor_gone(r);
	}
	free(procs);
}

int
runs_alive(void)
{
	int			n = 0;

	for (struct run *r = runs; r; r = r->next)
		if (is_live(r))
			n++;
	return n;
}

int
runs_pending_reports(void)
{
	int			n = 0;

	for (struct run *r = runs; r; r = r->next)
		if (r->report)
			n++;
	return n;
}

bool
runs_reports_will_book(int64_t epoch)
{
	for (struct run *r = runs; r; r = r->next)
		if (r->report && r->epoch == epoch && r->report_tries == 0 && !r->alone)
			return true;
	return false;
}

char *
runs_running_list(int64_t current_epoch)
{
	size_t		cap = 64,
				len = 0;
	char	   *s = malloc(cap);

	s[len++] = '{';
	for (struct run *r = runs; r; r = r->next)
	{
		char		num[32];
		int			k;

		/*
		 * Alive, whatever the epoch; or ended with its report on the way
		 * (then only under the current epoch: an earlier epoch's proc is
		 * not live anyway, and listing it would only make it a zombie).
		 */
		if (!is_live(r) && !(r->report && r->epoch == current_epoch))
			continue;
		k = snprintf(num, sizeof(num), "%s%" PRId64, len > 1 ? "," : "", r->b.proc);
		if (len + (size_t) k + 2 > cap)
			s = realloc(s, cap = cap * 2 + (size_t) k);
		memcpy(s + len, num, (size_t) k);
		len += (size_t) k;
	}
	s[len++] = '}';
	s[len] = '\0';
	return s;
}

/* a failed report: the next try after a backoff; returns the wait in seconds */
static double
report_later(struct run *r, int64_t now)
{
	r->report_tries++;
	r->next_report = now + (int64_t) (r->report_tries < 5 ? (1 << r->report_tries) : 30) * NS_PER_SEC / 2;
	return (double) (r->next_report - now) / NS_PER_SEC;
}

/*
 * Fault injection (--fault-drop-reports, for tests only): which fate this
 * attempt gets, drawn at random per attempt.  Half of the drops happen
 * before the report is sent, half after its answer has arrived.
 */
static enum report_fault
report_fault(double drop_percent)
{
	static bool seeded;
	double		x;

	if (drop_percent <= 0)
		return FAULT_NONE;
	if (!seeded)
	{
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		srandom((unsigned) ts.tv_sec ^ (unsigned) ts.tv_nsec ^
				((unsigned) getpid() << 16));
		seeded = true;
	}
	/* uniform in [0, 100) */
	x = (double) random() / ((double) RAND_MAX + 1.0) * 100.0;
	if (x < drop_percent / 2)
		return FAULT_BEFORE;
	if (x < drop_percent)
		return FAULT_AFTER;
	return FAULT_NONE;
}

/*
 * Send the run's complete(); NULL if no answer came (the connection is
 * gone).  with_oom: the server takes complete's oom flag (frameq 0.5.0).
 */
static struct pg_result *
call_complete(const struct run *r, const char *host, const char *token, int timeout_ms,
			  bool with_oom)
{
	char		epoch[32],
				proc[32],
				st[16],
				sig[16],
				rss[32];
	const char *params[8];

	snprintf(epoch, sizeof(epoch), "%" PRId64, r->epoch);
	snprintf(proc, sizeof(proc), "%" PRId64, r->b.proc);
	snprintf(st, sizeof(st), "%d", r->res.exit_status);
	snprintf(sig, sizeof(sig), "%d", r->res.exit_signal);
	snprintf(rss, sizeof(rss), "%" PRId64, r->res.max_rss);
	params[0] = host;
	params[1] = token;
	params[2] = epoch;
	params[3] = proc;
	params[4] = st;
	params[5] = sig;
	params[6] = r->res.max_rss >= 0 ? rss : NULL;
	params[7] = r->res.oom ? "true" : "false";
	if (with_oom)
		return db_exec("SELECT frameq.complete($1, $2, $3::bigint, $4::bigint, $5::int, $6::int, $7::bigint, $8::boolean)",
					   8, params, timeout_ms, NULL);
	return db_exec("SELECT frameq.complete($1, $2, $3::bigint, $4::bigint, $5::int, $6::int, $7::bigint)",
				   7, params, timeout_ms, NULL);
}

/*
 * Fault injection: act as if the connection had died before the answer
 * arrived.  The server has done (and committed) what it answered, the
 * agent does not know it.  The report stays pending and goes out again
 * after the reconnect, as after any lost connection.
 */
static void
discard_answer(const struct run *r, struct pg_result *res)
{
	if (db_ok(res) && db_ntuples(res) == 1)
		log_event("report-dropped", "proc=%" PRId64 " frame=%" PRId64 " when=after discarded=%s reason=\"fault injection: answer discarded, connection closed\"",
				  r->b.proc, r->b.frame, db_value(res, 0, 0));
	else
		log_event("report-dropped", "proc=%" PRId64 " frame=%" PRId64 " when=after discarded=error sqlstate=%s reason=\"fault injection: answer discarded, connection closed\"",
				  r->b.proc, r->b.frame, db_sqlstate(res));
	db_clear(res);
	db_disconnect("fault injection: report answer dropped");
}

/* the server answered a report (accepted, duplicate or stale) */
static void
log_reported(const struct run *r, const char *answer, bool with_oom)
{
	log_event("reported", "proc=%" PRId64 " frame=%" PRId64 " epoch=%" PRId64 " exit_status=%d exit_signal=%d max_rss=%" PRId64 " oom=%s answer=%s%s",
			  r->b.proc, r->b.frame, r->epoch, r->res.exit_status,
			  r->res.exit_signal, r->res.max_rss,
			  !with_oom ? "not-sent" : r->res.oom ? "yes" : "no", answer,
			  strcmp(answer, "stale") == 0 ?
			  " note=\"not this host's live proc any more: its output must not be published\"" : "");
}

/*
 * Act on complete()'s answer: an acknowledged report is done and its run
 * dropped; a failed one is tried again after a backoff.  False if the host
 * token was refused: then there is no backoff, the caller re-reads the
 * token file and the report goes out again with the new one (or not at
 * all, if the agent gives up on its token).
 */
static bool
take_answer(struct run *r, struct pg_result *res, int64_t now, bool with_oom)
{
	if (db_ok(res) && db_ntuples(res) == 1)
	{
		log_reported(r, db_value(res, 0, 0), with_oom);
		db_clear(res);
		drop(r);
		return true;
	}
	if (strcmp(db_sqlstate(res), "28P01") == 0)
	{
		log_event("report-failed", "proc=%" PRId64 " sqlstate=28P01 error=\"%s\"",
				  r->b.proc, db_error(res));
		db_clear(res);
		token_refused_flag = true;
		return false;
	}
	log_event("report-failed", "proc=%" PRId64 " sqlstate=%s error=\"%s\" retry_in=%.1fs",
			  r->b.proc, db_sqlstate(res), db_error(res), report_later(r, now));
	db_clear(res);
	return true;
}

bool
runs_send_reports(const char *host, const char *token, bool all_now, int timeout_ms,
				  double drop_percent, bool with_oom)
{
	int64_t		now = lease_clock_ns();
	struct run *r,
			   *next;

	for (r = runs; r; r = next)
	{
		struct pg_result *res;
		enum report_fault fault;

		next = r->next;
		if (!r->report || (!all_now && now < r->next_report))
			continue;
		fault = report_fault(drop_percent);
		if (fault == FAULT_BEFORE)
		{
			double		retry_in = report_later(r, now);

			log_event("report-dropped", "proc=%" PRId64 " frame=%" PRId64 " when=before retry_in=%.1fs reason=\"fault injection: not sent\"",
					  r->b.proc, r->b.frame, retry_in);
			continue;
		}
		res = call_complete(r, host, token, timeout_ms, with_oom);
		if (!res)
			return false;
		if (fault == FAULT_AFTER)
		{
			discard_answer(r, res);
			return false;
		}
		if (!take_answer(r, res, now, with_oom))
			return true;
	}
	return true;
}

void
runs_usage(double *cores, int64_t *memory, int *gpus, int *count)
{
	*cores = 0;
	*memory = 0;
	*gpus = 0;
	*count = 0;
	for (struct run *r = runs; r; r = r->next)
	{
		if (!is_live(r))
			continue;
		*cores += r->b.cores_n;
		*memory += r->b.memory;
		*gpus += r->b.gpus;
		(*count)++;
	}
}

int64_t
runs_next_poll(void)
{
	int64_t		t = INT64_MAX,
				now = lease_clock_ns();

	/* not our children (no SIGCHLD), orphans, stuck ones: look again soon */
	for (struct run *r = runs; r; r = r->next)
		if ((r->sup_alive && (!r->child || r->kill_sent_at)) || r->orphan)
			t = now + 100000000;
	return t;
}

/* when r's report is due: its backoff, and the report window if others run */
static int64_t
report_due(const struct run *r, int64_t window_ns, bool others_run)
{
	int64_t		t = r->next_report;

	if (others_run && !r->alone && r->ended_ns + window_ns > t)
		t = r->ended_ns + window_ns;
	return t;
}

int64_t
runs_next_report(int64_t window_ns)
{
	int64_t		t = INT64_MAX;
	bool		others_run = runs_alive() > 0;

	for (struct run *r = runs; r; r = r->next)
		if (r->report && report_due(r, window_ns, others_run) < t)
			t = report_due(r, window_ns, others_run);
	return t;
}

/* ------------------------------------------------------ reports in batches */

/* a growing array literal, "{a,b,c}" */
struct literal
{
	char	   *s;
	size_t		len,
				cap;
};

static void
literal_add(struct literal *l, const char *v)
{
	size_t		need = l->len + strlen(v) + 3;
	char		sep;

	if (need > l->cap)
	{
		l->cap = need * 2;
		l->s = realloc(l->s, l->cap);
		if (!l->s)
			abort();
	}
	sep = l->len == 0 ? '{' : ',';
	l->s[l->len++] = sep;
	memcpy(l->s + l->len, v, strlen(v));
	l->len += strlen(v);
	l->s[l->len] = '\0';
}

static char *
literal_end(struct literal *l)
{
	if (l->len == 0)
		literal_add(l, "");
	l->s[l->len++] = '}';
	l->s[l->len] = '\0';
	return l->s;
}

bool
runs_batch_take(struct report_batch *b, bool all_now, int64_t window_ns)
{
	int64_t		now = lease_clock_ns();
	bool		others_run = runs_alive() > 0;
	struct run *first = NULL;
	struct literal procs = {0},
				statuses = {0},
				signals = {0},
				rss = {0},
				ooms = {0};

	memset(b, 0, sizeof(*b));
	/* due when any of its reports is; then it takes every one it may */
	for (struct run *r = runs; r && !first; r = r->next)
		if (r->report && (all_now || now >= report_due(r, window_ns, others_run)))
			first = r;
	if (!first)
		return false;
	b->epoch = first->epoch;
	b->runs = calloc(REPORT_BATCH_MAX, sizeof(*b->runs));
	for (struct run *r = runs; r && b->n < REPORT_BATCH_MAX; r = r->next)
	{
		char		num[32];

		if (!r->report || r->epoch != b->epoch || (!all_now && now < r->next_report))
			continue;
		b->runs[b->n++] = r;
		b->alone |= r->alone;
		snprintf(num, sizeof(num), "%" PRId64, r->b.proc);
		literal_add(&procs, num);
		snprintf(num, sizeof(num), "%d", r->res.exit_status);
		literal_add(&statuses, num);
		snprintf(num, sizeof(num), "%d", r->res.exit_signal);
		literal_add(&signals, num);
		snprintf(num, sizeof(num), "%" PRId64, r->res.max_rss);
		literal_add(&rss, r->res.max_rss >= 0 ? num : "NULL");
		literal_add(&ooms, r->res.oom ? "t" : "f");
	}
	b->procs = literal_end(&procs);
	b->statuses = literal_end(&statuses);
	b->signals = literal_end(&signals);
	b->max_rss = literal_end(&rss);
	b->ooms = literal_end(&ooms);
	return true;
}

void
runs_batch_free(struct report_batch *b)
{
	free(b->runs);
	free(b->procs);
	free(b->statuses);
	free(b->signals);
	free(b->max_rss);
	free(b->ooms);
	memset(b, 0, sizeof(*b));
}

void
runs_batch_stmt(const struct report_batch *b, const char *host, const char *token,
				char *epoch, size_t epochlen, const char **params, struct db_stmt *st)
{
	snprintf(epoch, epochlen, "%" PRId64, b->epoch);
	params[0] = host;
	params[1] = token;
	params[2] = epoch;
	params[3] = b->procs;
	params[4] = b->statuses;
	params[5] = b->signals;
	params[6] = b->max_rss;
	params[7] = b->ooms;
	/* one row per report, in the order sent */
	st->sql = "SELECT u.answer FROM pg_catalog.unnest(frameq.complete_many($1, $2, $3::bigint, "
		"$4::bigint[], $5::int[], $6::int[], $7::bigint[], $8::boolean[])) "
		"WITH ORDINALITY AS u(answer, i) ORDER BY u.i";
	st->nparams = 8;
	st->params = params;
}

enum report_fault
runs_batch_fault(struct report_batch *b, double drop_percent)
{
	enum report_fault fault = report_fault(drop_percent);
	int64_t		now = lease_clock_ns();

	if (fault != FAULT_BEFORE)
		return fault;
	for (int i = 0; i < b->n; i++)
	{
		struct run *r = b->runs[i];
		double		retry_in = report_later(r, now);

		log_event("report-dropped", "proc=%" PRId64 " frame=%" PRId64 " when=before retry_in=%.1fs reason=\"fault injection: not sent\"",
				  r->b.proc, r->b.frame, retry_in);
	}
	return fault;
}

void
runs_batch_discard(struct report_batch *b, struct pg_result *res)
{
	bool		answered = db_ok(res) && db_ntuples(res) == b->n;

	for (int i = 0; i < b->n; i++)
	{
		struct run *r = b->runs[i];

		if (answered)
			log_event("report-dropped", "proc=%" PRId64 " frame=%" PRId64 " when=after discarded=%s reason=\"fault injection: answer discarded, connection closed\"",
					  r->b.proc, r->b.frame, db_value(res, i, 0));
		else
			log_event("report-dropped", "proc=%" PRId64 " frame=%" PRId64 " when=after discarded=error sqlstate=%s reason=\"fault injection: answer discarded, connection closed\"",
					  r->b.proc, r->b.frame, db_sqlstate(res));
	}
	db_disconnect("fault injection: report answer dropped");
}

bool
runs_batch_answers(struct report_batch *b, struct pg_result *res, int booked)
{
	struct literal procs = {0},
				answers = {0};
	char		num[32];

	if (db_ntuples(res) != b->n)
	{
		/* not the answer complete_many gives: keep them all, send them again */
		double		retry_in = 0;

		for (int i = 0; i < b->n; i++)
			retry_in = report_later(b->runs[i], lease_clock_ns());
		log_event("batch-failed", "epoch=%" PRId64 " procs=%s part=complete error=\"%d answers to %d reports\" retry_in=%.1fs",
				  b->epoch, b->procs, db_ntuples(res), b->n, retry_in);
		return false;
	}
	for (int i = 0; i < b->n; i++)
	{
		snprintf(num, sizeof(num), "%" PRId64, b->runs[i]->b.proc);
		literal_add(&procs, num);
		literal_add(&answers, db_value(res, i, 0));
	}
	/* what the checker of the fault harness matches against the runs */
	if (booked >= 0)
		snprintf(num, sizeof(num), "%d", booked);
	log_event("batch", "epoch=%" PRId64 " reports=%d procs=%s answers=%s booked=%s",
			  b->epoch, b->n, procs.s + 1, answers.s + 1, booked < 0 ? "none" : num);
	free(procs.s);
	free(answers.s);
	for (int i = 0; i < b->n; i++)
	{
		log_reported(b->runs[i], db_value(res, i, 0), true);
		drop(b->runs[i]);
		b->runs[i] = NULL;
	}
	b->n = 0;
	return true;
}

bool
runs_batch_failed(struct report_batch *b, struct pg_result *res, const char *part, bool alone)
{
	int64_t		now = lease_clock_ns();
	bool		token = res && strcmp(db_sqlstate(res), "28P01") == 0;
	double		retry_in = 0;

	for (int i = 0; i < b->n; i++)
	{
		struct run *r = b->runs[i];

		if (!res)
		{
			/* another statement failed and took the completes with it: again at once */
			r->alone |= alone;
			r->next_report = now;
		}
		else if (!token)
			retry_in = report_later(r, now);
	}
	log_event("batch-failed", "epoch=%" PRId64 " procs=%s part=%s sqlstate=%s error=\"%s\" retry_in=%.1fs%s",
			  b->epoch, b->procs, part, res ? db_sqlstate(res) : "-",
			  res ? db_error(res) : "another statement failed, so its transaction rolled back",
			  retry_in, res ? "" : alone ? " next=\"the reports again, without a booking\"" :
			  " next=\"the reports again, without the log reports\"");
	if (token)
		token_refused_flag = true;
	return !token;
}

/* ---------------------------------------------------------- log reports */

/* a growing array literal of quoted elements, "{"a","b"}" */
static void
literal_add_quoted(struct literal *l, const char *v)
{
	/* a separator, two quotes, an escape per character, the closing brace, NUL */
	size_t		need = l->len + 2 * strlen(v) + 5;
	char		sep;

	if (need > l->cap)
	{
		l->cap = need * 2;
		l->s = realloc(l->s, l->cap);
		if (!l->s)
			abort();
	}
	sep = l->len == 0 ? '{' : ',';
	l->s[l->len++] = sep;
	l->s[l->len++] = '"';
	for (; *v; v++)
	{
		if (*v == '"' || *v == '\\')
			l->s[l->len++] = '\\';
		l->s[l->len++] = *v;
	}
	l->s[l->len++] = '"';
	l->s[l->len] = '\0';
}

void
runs_set_log(struct run *r, const char *entry)
{
	free(r->log_entry);
	r->log_entry = strdup(entry);
	r->log_alone = false;
}

int64_t
runs_next_log(void)
{
	int64_t		t = INT64_MAX;

	for (struct run *r = runs; r; r = r->next)
		if (r->log_entry)
		{
			int64_t		due = r->log_alone ? 0 : r->started_ns + LOG_REPORT_WAIT_NS;

			if (due < t)
				t = due;
		}
	return t;
}

bool
runs_logs_take(struct log_batch *lb, int64_t epoch)
{
	struct literal procs = {0},
				logs = {0};

	memset(lb, 0, sizeof(*lb));
	lb->epoch = epoch;
	lb->procs = calloc(REPORT_BATCH_MAX, sizeof(*lb->procs));
	for (struct run *r = runs; r; r = r->next)
	{
		char		num[32];

		if (!r->log_entry)
			continue;
		if (r->epoch != epoch)
		{
			/* booked under a lease that is over: report_log would refuse it */
			free(r->log_entry);
			r->log_entry = NULL;
			continue;
		}
		if (lb->n == REPORT_BATCH_MAX)
			continue;
		lb->procs[lb->n++] = r->b.proc;
		lb->alone |= r->log_alone;
		snprintf(num, sizeof(num), "%" PRId64, r->b.proc);
		literal_add(&procs, num);
		literal_add_quoted(&logs, r->log_entry);
	}
	if (lb->n == 0)
	{
		runs_logs_free(lb);
		return false;
	}
	lb->proc_list = literal_end(&procs);
	lb->log_list = literal_end(&logs);
	return true;
}

void
runs_logs_free(struct log_batch *lb)
{
	free(lb->procs);
	free(lb->proc_list);
	free(lb->log_list);
	memset(lb, 0, sizeof(*lb));
}

void
runs_logs_stmt(const struct log_batch *lb, const char *host, const char *token,
			   char *epoch, size_t epochlen, const char **params, struct db_stmt *st)
{
	snprintf(epoch, epochlen, "%" PRId64, lb->epoch);
	params[0] = host;
	params[1] = token;
	params[2] = epoch;
	params[3] = lb->proc_list;
	params[4] = lb->log_list;
	/*
	 * How many runs it wrote: false (an ended run, not ours) is no error.
	 * (The unnest of two arrays in FROM is syntax, not a function to
	 * qualify.)
	 */
	st->sql = "SELECT count(*) FILTER (WHERE frameq.report_log($1, $2, $3::bigint, x.proc, x.log)) "
		"FROM unnest($4::bigint[], $5::text[]) AS x(proc, log)";
	st->nparams = 5;
	st->params = params;
}

/* the run of proc, if it still has the log report lb took */
static struct run *
log_run(const struct log_batch *lb, int i)
{
	struct run *r = find(lb->procs[i]);

	return r && r->log_entry && r->epoch == lb->epoch ? r : NULL;
}

void
runs_logs_done(struct log_batch *lb, struct pg_result *res, const char *with)
{
	for (int i = 0; i < lb->n; i++)
	{
		struct run *r = log_run(lb, i);

		if (r)
		{
			free(r->log_entry);
			r->log_entry = NULL;
		}
	}
	log_event("logs-reported", "epoch=%" PRId64 " procs=%.*s written=%s with=%s",
			  lb->epoch, (int) strlen(lb->proc_list) - 2, lb->proc_list + 1, db_ntuples(res) == 1 ? db_value(res, 0, 0) : "?",
			  with);
}

void
runs_logs_failed(struct log_batch *lb, struct pg_result *res)
{
	bool		token = strcmp(db_sqlstate(res), "28P01") == 0;

	for (int i = 0; i < lb->n; i++)
	{
		struct run *r = log_run(lb, i);

		if (!r || token)
			continue;
		if (lb->alone)
		{
			free(r->log_entry);
			r->log_entry = NULL;
		}
		else
			r->log_alone = true;
	}
	log_event("log-report-failed", "epoch=%" PRId64 " procs=%.*s sqlstate=%s error=\"%s\" next=%s",
			  lb->epoch, (int) strlen(lb->proc_list) - 2, lb->proc_list + 1, db_sqlstate(res), db_error(res),
			  token ? "again-with-the-token-in-the-file" : lb->alone ? "dropped" : "again-alone");
}

bool
runs_logs_pending(void)
{
	for (struct run *r = runs; r; r = r->next)
		if (r->log_entry)
			return true;
	return false;
}
