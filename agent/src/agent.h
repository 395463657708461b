/*
 * agent.h: what the parts of frameq-agent share.
 *
 * The agent is one single-threaded process (main.c) that talks to the
 * database over one libpq connection (db.c) and runs each booking under a
 * supervisor process of its own (supervisor.c).  runs.c keeps the table of
 * bookings on this machine; statefile.c is the on-disk side of it, which
 * outlives the agent; config.c, resources.c and log.c are what their names
 * say.  memory.c measures a render's process tree and looks for proof of an
 * OOM kill (for the supervisor); output.c follows a render's log file and
 * builds the report heartbeats carry (for the agent).
 */
#ifndef FRAMEQ_AGENT_H
#define FRAMEQ_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define AGENT_VERSION "0.7.0"

/*
 * The versions of the frameq extension this agent speaks.  What it calls
 * (attach, heartbeat, reserve, complete) has the same arguments from 0.1.0
 * to 0.5.0, but its renders are promised FRAMEQ_RUN_SECRET, which owns()
 * checks, and both came with 0.2.0.  A newer extension may change what the
 * calls mean, so it needs an agent built for it.  Outside this range the
 * agent stops with EXIT_VERSION (main.c, extension_spoken).
 */
#define FRAMEQ_OLDEST "0.2.0"
#define FRAMEQ_NEWEST "0.7.0"
#define EXIT_VERSION 3

#define NS_PER_SEC 1000000000LL

/* ---------------------------------------------------------------- log.c */

/* one line per event: "<ISO 8601 UTC time> <event> <details>" on stdout */
extern void log_event(const char *event, const char *fmt,...)
			__attribute__((format(printf, 2, 3)));

/* text from elsewhere (server messages) made fit for a quoted log value */
extern const char *log_clean(const char *s);

/*
 * The lease clock.  CLOCK_BOOTTIME is monotonic (a wall-clock step never
 * moves it) and, unlike CLOCK_MONOTONIC, keeps counting while the machine
 * is suspended, so a host that wakes up after its lease sees it expired.
 * It is one clock for the whole machine, so the agent and its supervisors
 * can exchange instants of it.
 */
extern int64_t lease_clock_ns(void);

/* ------------------------------------------------------------- config.c */

struct config
{
	char	   *conninfo;		/* libpq connection string ("" = PG* env) */
	char	   *host;			/* the host's registered name */
	char	   *token_file;
	double		cores;			/* offered; <= 0: what the machine has */
	int64_t		memory;			/* offered bytes; <= 0: what the machine has */
	int			gpus;			/* offered; < 0: what the machine has */
	char	   *tags;			/* informational (registration owns tags) */
	char	   *state_dir;
	char	   *log_dir;
	char	   *work_dir;
	double		kill_grace;		/* seconds from SIGTERM to SIGKILL */
	int			max_frames;		/* frames at once; 0 = as many as fit */
	bool		kill_on_term;	/* SIGTERM kills renders (else lets them finish) */
	double		reserve_interval;	/* seconds between reserves that found nothing */
	double		report_window;	/* ms a report waits for other ends (batching) */
	double		fault_drop_reports; /* percent of complete() calls to drop (tests) */
	bool		enforce_memory; /* kill a render whose tree outgrows its share */
	char	   *config_file;
};

/*
 * Build a configuration from (lowest to highest precedence) the defaults,
 * the config file, FRAMEQ_<OPTION> environment variables and argv.  Returns
 * 0 on success, 1 if --help/--version was handled (printed), -1 on error
 * (message in err).
 */
extern int	config_load(struct config *cfg, int argc, char **argv,
						char *err, size_t errlen);
extern void config_free(struct config *cfg);

/* read the host token, refusing a file that others may read; malloc'd */
extern char *config_read_token(const char *path, char *err, size_t errlen);

/* names of the environment variables the agent reads (NULL terminated) */
extern const char *const *config_env_names(void);

/* parse "4GB", "512MB", "1073741824" (steps of 1024, as pg_size_bytes) */
extern bool parse_size(const char *s, int64_t *out);

/* ---------------------------------------------------------- resources.c */

struct resources
{
	double		cores;
	int64_t		memory;
	int			gpus;
	int64_t		gpu_memory;		/* total over all GPUs, bytes */
};

extern void resources_detect(struct resources *r);

/* ----------------------------------------------------------------- db.c */
/*
 * What frameq 0.5.0 added to the calls: heartbeat's report (idle time, last
 * output line and progress of each render), complete's oom flag, and the
 * booking's progress_pattern.  The agent uses them only with a database at
 * 0.5.0 or later whose heartbeat and complete take them (db_reports_taken).
 */
#define FRAMEQ_REPORTS "0.5.0"

/*
 * What frameq 0.6.0 added: report_log(), where each render's output is
 * (this machine's name and the log file), told after the render's start
 * (see "Log reports" below).
 */
#define FRAMEQ_RUN_LOG "0.6.0"

/*
 * ... and complete_many(), many reports in one call, which the agent sends
 * together with the reserve() of the room they freed, in one transaction
 * (runs.c, "Reports in batches").  Used only with a database at 0.6.0 or
 * later that has it (db_batch_taken).
 */
#define FRAMEQ_BATCH "0.6.0"

struct pg_result;

extern bool db_connected(void);

/* connect; refuses (and drops) a server in recovery.  true if connected */
extern bool db_connect(const char *conninfo, const char *host);
extern void db_disconnect(const char *why);
extern int	db_socket(void);

/*
 * The connected database's name, and its frameq version ("" if none) as
 * read at connect or by the last db_reread_extension_version (false if
 * that failed: the connection may be closed).
 */
extern const char *db_database(void);
extern const char *db_extension_version(void);
extern bool db_reread_extension_version(int timeout_ms);

/* do the database's heartbeat take a report and its complete an oom flag? */
extern bool db_reports_taken(void);

/* has the database complete_many (see FRAMEQ_BATCH)? */
extern bool db_batch_taken(void);

/* is the server's encoding UTF8 (else only ASCII goes into reports)? */
extern bool db_server_utf8(void);

/*
 * Run one statement with parameters, waiting at most timeout_ms.  Returns
 * NULL if the connection failed or timed out (it is closed then: the
 * answer is unknown); otherwise the result, which may be an error
 * (check with db_ok / db_sqlstate).  *sent_at (if not NULL) gets the lease
 * clock just before the statement was sent.
 */
extern struct pg_result *db_exec(const char *sql, int nparams,
								 const char *const *params, int timeout_ms,
								 int64_t *sent_at);

/* one statement of db_exec_many */
struct db_stmt
{
	const char *sql;
	int			nparams;
	const char *const *params;
};

/*
 * Run n statements in one round trip as one transaction (pipeline mode:
 * committed at the end if none failed, else rolled back whole; the
 * statements after a failed one answer PGRES_PIPELINE_ABORTED).  Each
 * results[i] gets statement i's result, which may be an error.  False if
 * the connection failed or timed out (it is closed then, and whether the
 * transaction committed is unknown; results[] are all NULL).
 */
extern bool db_exec_many(int n, const struct db_stmt *stmts, int timeout_ms,
						 struct pg_result **results);
extern bool db_ok(const struct pg_result *res);
extern const char *db_sqlstate(const struct pg_result *res);
extern const char *db_error(const struct pg_result *res);
extern void db_clear(struct pg_result *res);
extern int	db_ntuples(const struct pg_result *res);
extern const char *db_value(const struct pg_result *res, int row, int col);
extern bool db_isnull(const struct pg_result *res, int row, int col);

/* who gets notifications (after every statement, and from db_consume) */
extern void db_set_notify_handler(void (*handler) (const char *channel,
												   const char *payload));

/* read what the socket has, and hand out notifications */
extern bool db_consume(void);
extern bool db_listen(const char *channel);

/* ---------------------------------------------------------- statefile.c */

/*
 * The state directory holds, per booking:
 *   run.<proc>     written by the agent before the render starts: what the
 *                  booking is and which supervisor holds it (pid and start
 *                  time, so a restarted agent can tell it from a reused pid);
 *                  the supervisor adds the render's process group
 *   result.<proc>  written (atomically) by the supervisor when the render
 *                  has ended: exit status, signal, max RSS, who killed it
 * Both are removed once the database has acknowledged the end.  A result is
 * never lost: a restarted agent reports what it finds before attaching.
 */
struct run_record
{
	int64_t		proc;
	int64_t		epoch;
	int64_t		frame;
	int64_t		job;
	int64_t		layer;
	int			frame_number;
	pid_t		sup_pid;
	unsigned long long sup_start;	/* /proc/<pid>/stat field 22 */
	pid_t		render_pid;		/* = its process group; 0 if not started */
};

enum killed_by
{
	KILLED_NONE,				/* ended on its own */
	KILLED_AGENT,				/* the agent asked (SIGTERM to the supervisor) */
	KILLED_FENCE,				/* the lease deadline passed */
	KILLED_ERROR,				/* the render could not be started */
	KILLED_MEMORY				/* its tree outgrew its memory (--enforce-memory) */
};

struct result_record
{
	int64_t		proc;
	int64_t		epoch;
	int			exit_status;
	int			exit_signal;
	int64_t		max_rss;		/* bytes, peak over the process tree; -1 unknown */
	enum killed_by killed_by;
	bool		oom;			/* killed for memory, by the supervisor or (proven) the kernel */
};

extern const char *killed_by_name(enum killed_by k);
extern int	state_write_run(const char *dir, const struct run_record *r);
extern int	state_read_run(const char *dir, int64_t proc, struct run_record *r);
extern int	state_write_result(const char *dir, const struct result_record *r);
extern int	state_read_result(const char *dir, int64_t proc, struct result_record *r);
extern void state_remove(const char *dir, int64_t proc);

/* proc ids that have a run file, malloc'd array */
extern int	state_list(const char *dir, int64_t **procs);

/* /proc helpers */
extern bool proc_start_time(pid_t pid, unsigned long long *start);

/* is the process with this pid and start time still alive (not a zombie)? */
extern bool proc_alive(pid_t pid, unsigned long long start);

/*
 * Does a process of group pgid in session sid exist?  Checking the session
 * too means a reused group id is not taken for the render's.
 */
extern bool group_alive(pid_t pgid, pid_t sid);
extern void group_signal(pid_t pgid, pid_t sid, int sig);

/* ---------------------------------------------------------- supervisor.c */

struct booking
{
	int64_t		proc;
	int64_t		frame;
	int64_t		job;
	int64_t		layer;
	int			frame_number;
	char	   *command;
	char		cores[32];		/* as the server printed it, e.g. "1.50" */
	double		cores_n;
	int64_t		memory;
	int			gpus;
	int64_t		gpu_memory;
	char	  **env;			/* "KEY=VALUE" from the layer's env */
	int			nenv;
	/* the booking's run_secret ("" if the server has none): FRAMEQ_RUN_SECRET */
	char		run_secret[65];
	/* the layer's progress_pattern (NULL if none), a POSIX extended regex */
	char	   *progress_pattern;
};

struct launch
{
	const struct booking *b;
	int64_t		epoch;
	const char *state_dir;
	const char *log_dir;
	const char *work_dir;
	int64_t		kill_grace_ns;
	const char *host;
	/* where the render's cgroup goes (memory.c); "" to measure through /proc */
	const char *cgroup_base;
};

/*
 * What the agent sends a supervisor after every renewal, and whenever a
 * render starts or ends: the lease deadline, the kill grace in force (a
 * reload may change it) and the most memory the render's tree may use (its
 * booking plus the host's unbooked memory; -1: not enforced).  24 bytes,
 * less than PIPE_BUF, so each message arrives whole.
 */
struct lease_msg
{
	int64_t		deadline_ns;	/* lease clock */
	int64_t		grace_ns;
	int64_t		memory_limit;	/* bytes; -1 none */
};

/* the supervisor process: never returns */
extern void supervisor_main(const struct launch *l, int pipe_fd)
			__attribute__((noreturn));

/* ---------------------------------------------------------------- runs.c */

enum kill_why
{
	WHY_NONE,
	WHY_ORDER,					/* the database ordered it (report the end) */
	WHY_LEASE,					/* the lease was lost (the release is the server's) */
	WHY_SHUTDOWN,				/* --kill-on-term */
	WHY_LEFTOVER				/* an earlier agent's render, found at start */
};

struct run;

extern struct run *runs_launch(const struct launch *l, int64_t deadline_ns);
/*
 * The memory limits after renders started or ended, to the supervisors
 * whose limit moved: once for all of them (runs_reap() and the main loop
 * call it, and the agent after launching its bookings).
 */
extern void runs_push_limits(void);
/* after every renewal: the new deadline and kill grace to every supervisor */
extern void runs_kill(int64_t proc, enum kill_why why, const char *reason);
extern void runs_kill_all(enum kill_why why, const char *reason);
extern void runs_push_deadline(int64_t deadline_ns, int64_t grace_ns);

/*
 * The memory the host offers, against which each render's limit is
 * computed (its booking plus what no running render has booked); <= 0
 * turns the limits off.  Sent to the supervisors at once.
 */
extern void runs_set_host_memory(int64_t bytes);

/*
 * The heartbeat's report, a JSON array with one object per render running
 * (see output.c; *entries of them); NULL if none.  Caller frees.
 */
extern char *runs_report(bool utf8, int *entries);

/* reap exited supervisors, read results, finish off orphaned renders */
extern void runs_reap(int64_t kill_grace_ns);

/*
 * Find what an earlier agent left in the state directory: ended renders
 * become pending reports, live ones are killed.
 */
extern void runs_adopt_leftovers(const char *state_dir);

/* processes (supervisors or renders) still alive */
extern int	runs_alive(void);

/* the "{1,2,3}" list a heartbeat sends; caller frees */
extern char *runs_running_list(int64_t current_epoch);

/* ended runs whose report the database has not acknowledged yet */
extern int	runs_pending_reports(void);

/*
 * Is a report of the lease held (epoch) pending that will go, in its
 * report window, with a booking (batched: not failed before, not to go
 * alone)?  Then that booking is the one to make (main.c, reserve_time).
 */
extern bool runs_reports_will_book(int64_t epoch);

/*
 * Send the reports that are due.  Stops at the first connection failure.
 * Returns false if the connection failed.  drop_percent (fault injection,
 * for tests only; normally 0) drops that share of the attempts at random:
 * half are not sent (retried as a failed report is), half are sent and
 * their answer discarded as if the connection had died before it arrived
 * (the connection is closed; the report is sent again after reconnecting).
 */
extern bool runs_send_reports(const char *host, const char *token, bool all_now,
							  int timeout_ms, double drop_percent, bool with_oom);

/* used resources of live bookings */
extern void runs_usage(double *cores, int64_t *memory, int *gpus, int *count);

/* when processes not signalled to us (leftovers, orphans) need a look */
extern int64_t runs_next_poll(void);

/*
 * When the next report is due (only meaningful while connected); with
 * window_ns, the report window of batched reports (0 for single ones).
 */
extern int64_t runs_next_report(int64_t window_ns);

/*
 * Reports in batches (frameq 0.6.0, complete_many; runs.c).  A batch is
 * due when one of its reports is: its backoff is over and, while another
 * render runs, the report window since its end has passed.  It then takes
 * every pending report of that report's epoch whose backoff is over (at
 * most REPORT_BATCH_MAX); all of them with all_now (before an attach).
 */
#define REPORT_BATCH_MAX 1000

struct report_batch
{
	int64_t		epoch;			/* the epoch its procs were booked under */
	int			n;
	bool		alone;			/* must go without a booking (see runs_batch_failed) */
	struct run **runs;
	/* the arrays complete_many takes, as literals */
	char	   *procs,
			   *statuses,
			   *signals,
			   *max_rss,
			   *ooms;
};

/* fault injection (--fault-drop-reports): the fate of one attempt */
enum report_fault
{
	FAULT_NONE,
	FAULT_BEFORE,				/* not sent at all */
	FAULT_AFTER					/* sent and committed; the answer is lost */
};

/* the due batch, if any (true); free it with runs_batch_free */
extern bool runs_batch_take(struct report_batch *b, bool all_now, int64_t window_ns);
extern void runs_batch_free(struct report_batch *b);

/*
 * The complete_many statement of the batch: one row per report, its
 * answer, in order.  params (8) and epoch hold what st points to.
 */
extern void runs_batch_stmt(const struct report_batch *b, const char *host,
							const char *token, char *epoch, size_t epochlen,
							const char **params, struct db_stmt *st);

/*
 * Draw this attempt's fault (--fault-drop-reports).  FAULT_BEFORE is dealt
 * with here (logged, each report tried again after a backoff); after
 * FAULT_AFTER the caller sends the batch and hands its answer to
 * runs_batch_discard, which logs it and closes the connection.
 */
extern enum report_fault runs_batch_fault(struct report_batch *b, double drop_percent);
extern void runs_batch_discard(struct report_batch *b, struct pg_result *res);

/*
 * The transaction committed: take each report's answer as a single
 * complete()'s (logged as "reported"; the run is done with), and log the
 * batch (booked: how many bookings its transaction made; -1 if it had no
 * reserve).  False if the answer is not one per report: then they all
 * stay pending, to be sent again after a backoff (and answered
 * 'duplicate').
 */
extern bool runs_batch_answers(struct report_batch *b, struct pg_result *res, int booked);

/*
 * The transaction failed, so none of its reports was taken.  res: the
 * completes' own error (each report is tried again after a backoff; a
 * refused token instead sets the flag runs_take_token_refused reads, and
 * false is returned); NULL: another statement (part: the booking, or the
 * log reports) failed and rolled the completes back with it, so they go
 * again at once, and, if alone, without a booking.  part names the
 * statement that failed, for the log.
 */
extern bool runs_batch_failed(struct report_batch *b, struct pg_result *res,
							  const char *part, bool alone);

/*
 * Log reports (frameq 0.6.0, report_log; runs.c).  A render's "<machine>:
 * <log file>" waits from its launch for the agent's next transaction of
 * reports or of a reserve, and goes before the complete_many in it (an
 * ended run takes no log).  After LOG_REPORT_WAIT_NS without one it is
 * due on its own (runs_next_log), so that runs.log shows a running
 * render's log within a second.
 */
#define LOG_REPORT_WAIT_NS NS_PER_SEC

struct log_batch
{
	int64_t		epoch;			/* the lease held */
	int			n;
	bool		alone;			/* one of them must go on its own */
	int64_t    *procs;
	/* the arrays the statement takes, as literals */
	char	   *proc_list,
			   *log_list;
};

/* the run's log report, pending from now */
extern void runs_set_log(struct run *r, const char *entry);
extern bool runs_logs_pending(void);

/* when a log report is due on its own: INT64_MAX if none is pending */
extern int64_t runs_next_log(void);

/*
 * Every pending log report of the lease held (epoch), at most
 * REPORT_BATCH_MAX (true); those of earlier epochs are dropped, as
 * report_log refuses them.  Free it with runs_logs_free.
 */
extern bool runs_logs_take(struct log_batch *lb, int64_t epoch);
extern void runs_logs_free(struct log_batch *lb);

/*
 * The statement: report_log for each, answering how many runs it wrote
 * (one row).  params (5) and epoch hold what st points to.
 */
extern void runs_logs_stmt(const struct log_batch *lb, const char *host,
						   const char *token, char *epoch, size_t epochlen,
						   const char **params, struct db_stmt *st);

/*
 * Its transaction committed (res: the statement's answer; with: what it
 * went with, for the log): the log reports are done.  If the transaction
 * failed elsewhere, nothing is called: they stay pending.
 */
extern void runs_logs_done(struct log_batch *lb, struct pg_result *res, const char *with);

/*
 * The report_log statement failed (res): its log reports go again at once
 * on their own, or are dropped if they went on their own (logged
 * log-report-failed); a refused token keeps them (the caller deals with
 * the token).
 */
extern void runs_logs_failed(struct log_batch *lb, struct pg_result *res);

extern void runs_set_state_dir(const char *dir);

/* set when a supervisor could not start a render (back off reserving) */
extern bool runs_take_launch_error(void);

/* set when a run ended (there is room again) */
extern bool runs_take_ended(void);

/* set when a report was refused with 28P01 (bad host token) */
extern bool runs_take_token_refused(void);

/* ------------------------------------------------------------- memory.c */

/* how often a supervisor measures its render's tree (and enforces its limit) */
#define MEMORY_SAMPLE_NS (NS_PER_SEC / 4)

/*
 * May the agent give each render a cgroup (v2, with the memory controller)?
 * If so, base gets the directory their cgroups go in; if not, why says why.
 * Called once, at start.
 */
extern bool memory_cgroup_base(char *base, size_t len, char *why, size_t whylen);

/* can the process tree be walked (/proc/<pid>/task/<tid>/children)? */
extern bool memory_tree_walkable(void);

/* can the kernel log be read (/dev/kmsg)? */
extern bool memory_kmsg_readable(void);

/* what one supervisor watches: its render's tree and the kernel's OOM kills */
#define MEMORY_SEEN_MAX 1024
struct memwatch
{
	pid_t		me;				/* the supervisor: its descendants are the tree */
	pid_t		render;
	char		cgroup[4096];	/* the render's cgroup; "" if none */
	int			kmsg_fd;		/* the kernel log from the render's start; -1 */
	int64_t		oom_kills;		/* memory.events oom_kill at the start */
	int64_t		peak;			/* the most the tree used, sampled */
	int64_t		current;		/* what it used at the last sample */
	pid_t		seen[MEMORY_SEEN_MAX];	/* pids of the tree seen so far */
	int			nseen;
	char		proof[256];		/* a kernel OOM kill of the tree, if seen */
};

/*
 * Before the render starts: its cgroup (made here, under base; "" for
 * none; false if it could not be made) and the kernel log's current end.
 */
extern bool memwatch_prepare(struct memwatch *w, pid_t me, const char *base, int64_t proc);

/* the render is forked (and waits): put it into the cgroup; false if not */
extern bool memwatch_adopt(struct memwatch *w, pid_t render);

/* measure the tree now: bytes in use (updates peak, seen pids, proof) */
extern int64_t memwatch_sample(struct memwatch *w);

/* SIGKILL the whole tree: its process group, every pid walked, the cgroup */
extern void memwatch_kill_tree(struct memwatch *w);

/*
 * The render has ended: the peak over its life (at least floor, the
 * rusage peak of its largest process), and whether the kernel OOM-killed
 * part of it, with the proof in w->proof.
 */
extern int64_t memwatch_peak(struct memwatch *w, int64_t floor);
extern bool memwatch_kernel_oom(struct memwatch *w);

/* kill what is left in the render's cgroup and remove it */
extern void memwatch_release(struct memwatch *w);

/* ------------------------------------------------------------- output.c */

/*
 * What the agent knows of a render's output, read from its log file at
 * each heartbeat: when it last wrote (the file's mtime), its last line
 * (at most OUTPUT_LINE_CHARS characters, NUL bytes and invalid UTF-8
 * dropped) and the progress its layer's pattern found in it.
 */
#define OUTPUT_LINE_CHARS 200
#define OUTPUT_LINE_MAX 4096	/* bytes of a line kept for matching */
struct output
{
	char	   *path;			/* the render's log file; NULL: none */
	int64_t		offset;			/* read up to here */
	char		partial[OUTPUT_LINE_MAX];	/* the line being written */
	size_t		plen;
	bool		skip_line;		/* drop the rest of a line cut off by a skip */
	char		last_line[OUTPUT_LINE_CHARS * 4 + 1];	/* last complete line */
	int			progress;		/* 0 to 100; -1 none */
	void	   *regex;			/* the compiled pattern; NULL if none */
};

/* the log file of a booking's run, as the supervisor names it */
extern void output_log_path(char *buf, size_t len, const char *log_dir,
							const struct booking *b);

/* start following a run's log; pattern may be NULL */
extern void output_init(struct output *o, const char *path, const char *pattern,
						int64_t proc);
extern void output_free(struct output *o);

/*
 * Read what the render wrote since the last call and append its report
 * entry to *json (a growing malloc'd string of length *len).  False if
 * the log cannot be read (no entry).
 */
extern bool output_report(struct output *o, int64_t proc, bool utf8,
						  char **json, size_t *len, size_t *cap);

#endif							/* FRAMEQ_AGENT_H */
