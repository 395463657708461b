/*
 * supervisor.c: the process that holds one render and its lease deadline.
 *
 * The agent forks one supervisor per booking.  The supervisor starts its own
 * session (so signals to the agent's process group, a SIGSTOP of the agent,
 * or the agent's death leave it alone), waits for the agent's go (the first
 * lease deadline over its pipe, sent once the agent has recorded it in the
 * state directory), then runs the command as `/bin/sh -c` in a process group
 * of its own, its output to a log file per run.
 *
 * It holds the lease deadline: an instant on the lease clock that the agent
 * moves forward over the pipe after every renewal that succeeded (with the
 * kill grace in force).  When the deadline passes without a newer one - the
 * agent is dead, hung, paused or cut off from the database - it kills the
 * render's group itself: SIGTERM, and SIGKILL after the kill grace.  The agent computes the deadline so that
 * the render is dead before the server can release the frame (main.c).
 * End of file on the pipe (the agent died) changes nothing: the last
 * deadline still holds.  SIGTERM to the supervisor means "the agent wants
 * this render killed".
 *
 * When the render ends, the supervisor kills what is left of its group,
 * writes the result (exit status, signal, max RSS, whether and why it was
 * killed) atomically into the state directory and exits; the agent reports
 * it to the database.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent.h"

/* the render's side of the fork: never returns */
static void
exec_render(const struct launch *l, int logfd)
{
	const struct booking *b = l->b;
	const char *const *names = config_env_names();
	char		buf[64];
	sigset_t	all;
	int			devnull;

	setpgid(0, 0);

	/* a clean signal state: the agent ignores SIGPIPE and blocks others */
	for (int s = 1; s < NSIG; s++)
		if (s != SIGKILL && s != SIGSTOP)
			signal(s, SIG_DFL);
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);

	devnull = open("/dev/null", O_RDONLY);
	if (devnull >= 0 && devnull != STDIN_FILENO)
	{
		dup2(devnull, STDIN_FILENO);
		close(devnull);
	}
	dup2(logfd, STDOUT_FILENO);
	dup2(logfd, STDERR_FILENO);
	if (logfd > STDERR_FILENO)
		close(logfd);

	/* the agent's own settings (a conninfo may hold a password) stay out */
	for (int i = 0; names[i]; i++)
		unsetenv(names[i]);
	for (int i = 0; i < b->nenv; i++)
	{
		char	   *eq = strchr(b->env[i], '=');

		if (eq)
		{
			*eq = '\0';
			setenv(b->env[i], eq + 1, 1);
			*eq = '=';
		}
	}
	snprintf(buf, sizeof(buf), "%" PRId64, b->proc);
	setenv("FRAMEQ_PROC", buf, 1);
	snprintf(buf, sizeof(buf), "%" PRId64, b->frame);
	setenv("FRAMEQ_FRAME", buf, 1);
	snprintf(buf, sizeof(buf), "%" PRId64, b->job);
	setenv("FRAMEQ_JOB", buf, 1);
	snprintf(buf, sizeof(buf), "%" PRId64, b->layer);
	setenv("FRAMEQ_LAYER", buf, 1);
	snprintf(buf, sizeof(buf), "%d", b->frame_number);
	setenv("FRAMEQ_FRAME_NUMBER", buf, 1);
	setenv("FRAMEQ_CORES", b->cores, 1);
	setenv("FRAMEQ_HOST", l->host, 1);
	/* the proof the render gives frameq.owns(); never one inherited */
	if (b->run_secret[0])
		setenv("FRAMEQ_RUN_SECRET", b->run_secret, 1);
	else
		unsetenv("FRAMEQ_RUN_SECRET");

	execl("/bin/sh", "sh", "-c", b->command, (char *) NULL);
	dprintf(STDERR_FILENO, "frameq-agent: cannot run /bin/sh: %s\n", strerror(errno));
	_exit(127);
}

static void
finish(const struct launch *l, int exit_status, int exit_signal, int64_t max_rss,
	   enum killed_by killed_by)
{
	struct result_record res = {
		.proc = l->b->proc,
		.epoch = l->epoch,
		.exit_status = exit_status,
		.exit_signal = exit_signal,
		.max_rss = max_rss,
		.killed_by = killed_by
	};

	if (state_write_result(l->state_dir, &res) != 0)
		log_event("supervisor-error", "proc=%" PRId64 " error=\"cannot write the result: %s\"",
				  l->b->proc, strerror(errno));
	_exit(0);
}

/* the group of a render that has exited already must not be taken for live */
static bool
render_exited(pid_t render)
{
	siginfo_t	si;

	memset(&si, 0, sizeof(si));
	return waitid(P_PID, (id_t) render, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
		si.si_pid == render;
}

void
supervisor_main(const struct launch *l, int pipe_fd)
{
	const struct booking *b = l->b;
	sigset_t	mask;
	int			sigfd,
				timerfd,
				logfd;
	int64_t		deadline,
				grace;
	struct lease_msg first;
	int64_t		kill_at = 0;
	bool		pipe_open = true;
	bool		term_sent = false,
				kill_sent = false;
	enum killed_by killed_by = KILLED_NONE;
	pid_t		me,
				render;
	struct run_record rec;
	char		path[PATH_MAX];
	ssize_t		n;

	setsid();
	me = getpid();

	/* SIGTERM (the agent's kill) and SIGCHLD (the render) through a signalfd */
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGCHLD);
	sigprocmask(SIG_SETMASK, &mask, NULL);
	signal(SIGINT, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	/*
	 * The deadline is an absolute time on the lease clock, so a timer on
	 * that clock: it fires right after a suspend that outlasted it (poll's
	 * own timeout would not count the time suspended).
	 */
	timerfd = timerfd_create(CLOCK_BOOTTIME, TFD_CLOEXEC | TFD_NONBLOCK);

	/*
	 * Wait for the go: the agent has written run.<proc> (with this pid) into
	 * the state directory, so a restarted agent can find this render.  No go
	 * (the agent died first): nothing was started, nothing to do.
	 */
	do
		n = read(pipe_fd, &first, sizeof(first));
	while (n < 0 && errno == EINTR);
	if (n != sizeof(first))
		_exit(0);
	deadline = first.deadline_ns;
	grace = first.grace_ns;
	fcntl(pipe_fd, F_SETFL, fcntl(pipe_fd, F_GETFL) | O_NONBLOCK);

	if (chdir(l->work_dir) != 0)
	{
		log_event("supervisor-error", "proc=%" PRId64 " error=\"cannot enter work dir %s: %s\"",
				  b->proc, l->work_dir, strerror(errno));
		finish(l, 0, 0, -1, KILLED_ERROR);
	}
	snprintf(path, sizeof(path), "%s/job%" PRId64 ".layer%" PRId64 ".frame%d.%" PRId64 ".log",
			 l->log_dir, b->job, b->layer, b->frame_number, b->proc);
	logfd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY, 0644);
	if (logfd < 0)
	{
		log_event("supervisor-error", "proc=%" PRId64 " error=\"cannot open log %s: %s\"",
				  b->proc, path, strerror(errno));
		finish(l, 0, 0, -1, KILLED_ERROR);
	}

	/* a kill that came before the go: do not start at all */
	{
		struct signalfd_siginfo si;

		while (read(sigfd, &si, sizeof(si)) == sizeof(si))
			if (si.ssi_signo == SIGTERM)
				finish(l, 0, SIGTERM, -1, KILLED_AGENT);
	}

	render = fork();
	if (render < 0)
	{
		log_event("supervisor-error", "proc=%" PRId64 " error=\"fork: %s\"", b->proc, strerror(errno));
		finish(l, 0, 0, -1, KILLED_ERROR);
	}
	if (render == 0)
	{
		close(pipe_fd);
		close(sigfd);
		close(timerfd);
		exec_render(l, logfd);
	}
	/* both sides set the group, so no signal can find the render outside it */
	setpgid(render, render);
	close(logfd);

	if (state_read_run(l->state_dir, b->proc, &rec) == 0)
	{
		rec.render_pid = render;
		state_write_run(l->state_dir, &rec);
	}
	log_event("started", "proc=%" PRId64 " frame=%" PRId64 " pid=%d supervisor=%d log=%s",
			  b->proc, b->frame, (int) render, (int) me, path);

	for (;;)
	{
		int64_t		now,
					wake = -1;
		struct pollfd pfd[3];
		struct itimerspec its;
		uint64_t	ticks;
		int			np = 0;
		struct signalfd_siginfo si;
		int			status;
		struct rusage ru;
		pid_t		w;

		/* newer deadlines first: one that just arrived must count */
		while (pipe_open)
		{
			struct lease_msg m[32];

			n = read(pipe_fd, m, sizeof(m));
			if (n > 0)
			{
				for (ssize_t i = 0; i < n / (ssize_t) sizeof(m[0]); i++)
				{
					if (m[i].deadline_ns > deadline)
						deadline = m[i].deadline_ns;
					grace = m[i].grace_ns;
				}
				continue;
			}
			if (n == 0)
			{
				pipe_open = false;
				close(pipe_fd);
				log_event("agent-gone", "proc=%" PRId64 " supervisor=%d deadline_in=%.3fs",
						  b->proc, (int) me,
						  (double) (deadline - lease_clock_ns()) / NS_PER_SEC);
			}
			else if (errno == EINTR)
				continue;
			break;
		}

		/* the render, and only it */
		while ((w = wait4(-1, &status, WNOHANG, &ru)) > 0)
		{
			if (w != render)
				continue;
			/* whatever it left behind in its group goes with it */
			group_signal(render, me, SIGKILL);
			if (WIFSIGNALED(status))
				finish(l, 128 + WTERMSIG(status), WTERMSIG(status),
					   (int64_t) ru.ru_maxrss * 1024, killed_by);
			finish(l, WEXITSTATUS(status), 0, (int64_t) ru.ru_maxrss * 1024, killed_by);
		}

		now = lease_clock_ns();
		if (!term_sent && now >= deadline && !render_exited(render))
		{
			/* the lease may be gone: the render must be dead before the server gives up */
			log_event("fenced", "proc=%" PRId64 " pid=%d supervisor=%d reason=\"lease deadline passed\" late=%.3fs",
					  b->proc, (int) render, (int) me,
					  (double) (now - deadline) / NS_PER_SEC);
			killed_by = KILLED_FENCE;
			kill(-render, SIGTERM);
			kill(-render, SIGCONT);
			term_sent = true;
			kill_at = now + grace;
		}
		if (term_sent && !kill_sent && now >= kill_at)
		{
			kill(-render, SIGKILL);
			kill_sent = true;
		}

		if (!term_sent)
			wake = deadline;
		else if (!kill_sent)
			wake = kill_at;

		memset(&its, 0, sizeof(its));
		if (wake >= 0)
		{
			/* 0 would disarm it: a wake-up that is due fires in 1 ns */
			its.it_value.tv_sec = wake / NS_PER_SEC;
			its.it_value.tv_nsec = wake % NS_PER_SEC;
			if (wake <= 0)
				its.it_value.tv_nsec = 1;
		}
		if (timerfd >= 0)
			timerfd_settime(timerfd, TFD_TIMER_ABSTIME, &its, NULL);

		pfd[np].fd = sigfd;
		pfd[np].events = POLLIN;
		np++;
		if (timerfd >= 0)
		{
			pfd[np].fd = timerfd;
			pfd[np].events = POLLIN;
			np++;
		}
		if (pipe_open)
		{
			pfd[np].fd = pipe_fd;
			pfd[np].events = POLLIN;
			np++;
		}
		/* without a timer (cannot happen on Linux >= 3.15) poll's timeout it is */
		poll(pfd, (nfds_t) np,
			 wake < 0 || timerfd >= 0 ? -1 : (int) ((wake - now + 999999) / 1000000));
		if (timerfd >= 0)
			while (read(timerfd, &ticks, sizeof(ticks)) > 0)
				;

		while (read(sigfd, &si, sizeof(si)) == sizeof(si))
		{
			if (si.ssi_signo != SIGTERM || term_sent || render_exited(render))
				continue;
			killed_by = KILLED_AGENT;
			kill(-render, SIGTERM);
			kill(-render, SIGCONT);
			term_sent = true;
			kill_at = lease_clock_ns() + grace;
		}
	}
}
