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
 * It measures the render's memory (memory.c) every MEMORY_SAMPLE_NS, over
 * its whole process tree: it is a child subreaper, so what the render
 * forks stays its descendant even when orphaned.  A tree that uses more
 * than the limit the agent sends with each deadline (the booking plus the
 * host's unbooked memory; none with --no-enforce-memory) is SIGKILLed at
 * once, and the run is reported as an OOM.  So is a failed render of which
 * the kernel OOM-killed a part, with proof (memory.c); nothing else is.
 *
 * When the render ends, the supervisor kills what is left of its group,
 * writes the result (exit status, signal, the tree's peak memory, whether
 * and why it was killed, whether for memory) atomically into the state
 * directory and exits; the agent reports it to the database.
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
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent.h"

/*
 * The render's side of the fork: never returns.  It waits for the
 * supervisor's go (end of file on go_fd), given once the render is in its
 * cgroup, so that nothing of it runs outside.
 */
static void
exec_render(const struct launch *l, int logfd, int go_fd)
{
	const struct booking *b = l->b;
	const char *const *names = config_env_names();
	char		buf[64];
	sigset_t	all;
	int			devnull;

	setpgid(0, 0);
	while (read(go_fd, buf, sizeof(buf)) < 0 && errno == EINTR)
		;
	close(go_fd);

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
	   enum killed_by killed_by, bool oom)
{
	struct result_record res = {
		.proc = l->b->proc,
		.epoch = l->epoch,
		.exit_status = exit_status,
		.exit_signal = exit_signal,
		.max_rss = max_rss,
		.killed_by = killed_by,
		.oom = oom
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

/*
 * What the supervisor knows about its render and its lease.  One process
 * holds one of these, so the steps of supervisor_main() share it rather
 * than a dozen arguments.
 */
struct supervisor
{
	const struct launch *l;
	pid_t		me;				/* the supervisor (also its session id) */
	pid_t		render;			/* the render (also its process group id) */
	int			pipe_fd;		/* deadlines from the agent */
	bool		pipe_open;		/* false once the agent has gone */
	int			sigfd;			/* SIGTERM and SIGCHLD */
	int			timerfd;		/* the next deadline or kill; -1 if none */
	int64_t		deadline;		/* lease clock: the render must stop by then */
	int64_t		grace;			/* from SIGTERM to SIGKILL */
	bool		term_sent;
	int64_t		kill_at;		/* when SIGKILL follows the SIGTERM */
	bool		kill_sent;
	enum killed_by killed_by;
	struct memwatch mem;		/* the render's tree (memory.c) */
	int64_t		memory_limit;	/* what the tree may use; -1 no limit */
	int64_t		next_sample;	/* lease clock */
	bool		memory_killed;
};

/*
 * Take SIGTERM (the agent's kill) and SIGCHLD (the render's end) through a
 * signalfd, so that the loop sees them between polls and never inside a
 * handler, and leave the other signals a terminal or the agent's group may
 * send without effect: the supervisor must outlive all of those.
 */
static void
open_event_fds(struct supervisor *s)
{
	sigset_t	mask;

	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGCHLD);
	sigprocmask(SIG_SETMASK, &mask, NULL);
	signal(SIGINT, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	s->sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);

	/*
	 * The deadline is an absolute time on the lease clock, so a timer on
	 * that clock: it fires right after a suspend that outlasted it (poll's
	 * own timeout would not count the time suspended).
	 */
	s->timerfd = timerfd_create(CLOCK_BOOTTIME, TFD_CLOEXEC | TFD_NONBLOCK);
}

/*
 * Wait for the go: the agent has written run.<proc> (with this pid) into
 * the state directory, so a restarted agent can find this render.  No go
 * (the agent died first): nothing was started, nothing to do.
 */
static void
wait_for_go(struct supervisor *s)
{
	struct lease_msg first;
	ssize_t		n;

	do
		n = read(s->pipe_fd, &first, sizeof(first));
	while (n < 0 && errno == EINTR);
	if (n != sizeof(first))
		_exit(0);
	s->deadline = first.deadline_ns;
	s->grace = first.grace_ns;
	s->memory_limit = first.memory_limit;
	fcntl(s->pipe_fd, F_SETFL, fcntl(s->pipe_fd, F_GETFL) | O_NONBLOCK);
}

/*
 * Enter the work directory and open the run's log file (its name goes to
 * path).  A render that cannot have either is not started at all, and the
 * result says so, so that the agent backs off rather than booking more
 * frames onto a broken host.
 */
static int
open_run_log(const struct launch *l, char *path, size_t pathlen)
{
	const struct booking *b = l->b;
	int			logfd;

	if (chdir(l->work_dir) != 0)
	{
		log_event("supervisor-error", "proc=%" PRId64 " error=\"cannot enter work dir %s: %s\"",
				  b->proc, l->work_dir, strerror(errno));
		finish(l, 0, 0, -1, KILLED_ERROR, false);
	}
	output_log_path(path, pathlen, l->log_dir, b);
	logfd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY, 0644);
	if (logfd < 0)
	{
		log_event("supervisor-error", "proc=%" PRId64 " error=\"cannot open log %s: %s\"",
				  b->proc, path, strerror(errno));
		finish(l, 0, 0, -1, KILLED_ERROR, false);
	}
	return logfd;
}

/* A kill that came before the go: the render is not started at all. */
static void
refuse_early_kill(const struct supervisor *s)
{
	struct signalfd_siginfo si;

	while (read(s->sigfd, &si, sizeof(si)) == sizeof(si))
		if (si.ssi_signo == SIGTERM)
			finish(s->l, 0, SIGTERM, -1, KILLED_AGENT, false);
}

/*
 * Fork the render into a process group (and, if the agent may make one, a
 * cgroup) of its own and record its pid in the state directory, so that a
 * later agent whose supervisor died can still find and kill the render's
 * group.
 */
static void
start_render(struct supervisor *s, int logfd, const char *path)
{
	const struct booking *b = s->l->b;
	struct run_record rec;
	int			go[2];

	if (!memwatch_prepare(&s->mem, s->me, s->l->cgroup_base, b->proc))
		log_event("warning", "proc=%" PRId64 " message=\"cannot make the render's cgroup under %s (%s); measuring through /proc\"",
				  b->proc, s->l->cgroup_base, strerror(errno));
	if (pipe2(go, O_CLOEXEC) != 0)
	{
		log_event("supervisor-error", "proc=%" PRId64 " error=\"pipe: %s\"", b->proc, strerror(errno));
		finish(s->l, 0, 0, -1, KILLED_ERROR, false);
	}
	s->render = fork();
	if (s->render < 0)
	{
		log_event("supervisor-error", "proc=%" PRId64 " error=\"fork: %s\"", b->proc, strerror(errno));
		finish(s->l, 0, 0, -1, KILLED_ERROR, false);
	}
	if (s->render == 0)
	{
		close(s->pipe_fd);
		close(s->sigfd);
		close(s->timerfd);
		close(go[1]);
		if (s->mem.kmsg_fd >= 0)
			close(s->mem.kmsg_fd);
		exec_render(s->l, logfd, go[0]);
	}
	/* both sides set the group, so no signal can find the render outside it */
	setpgid(s->render, s->render);
	close(logfd);
	close(go[0]);
	if (!memwatch_adopt(&s->mem, s->render))
		log_event("warning", "proc=%" PRId64 " message=\"cannot move the render into its cgroup (%s); measuring through /proc\"",
				  b->proc, strerror(errno));
	/* the go: the render may run now */
	close(go[1]);

	if (state_read_run(s->l->state_dir, b->proc, &rec) == 0)
	{
		rec.render_pid = s->render;
		state_write_run(s->l->state_dir, &rec);
	}
	log_event("started", "proc=%" PRId64 " frame=%" PRId64 " pid=%d supervisor=%d log=%s",
			  b->proc, b->frame, (int) s->render, (int) s->me, path);
}

/*
 * Take every deadline the agent has sent.  The newest counts, and it must
 * be read before the deadline is checked, or a renewal that has just
 * arrived would be missed and the render fenced for nothing.  End of file
 * (the agent died) changes nothing: the last deadline still holds.
 */
static void
read_deadlines(struct supervisor *s)
{
	while (s->pipe_open)
	{
		struct lease_msg m[32];
		ssize_t		n = read(s->pipe_fd, m, sizeof(m));

		if (n > 0)
		{
			for (ssize_t i = 0; i < n / (ssize_t) sizeof(m[0]); i++)
			{
				if (m[i].deadline_ns > s->deadline)
					s->deadline = m[i].deadline_ns;
				s->grace = m[i].grace_ns;
				s->memory_limit = m[i].memory_limit;
			}
			continue;
		}
		if (n == 0)
		{
			s->pipe_open = false;
			close(s->pipe_fd);
			log_event("agent-gone", "proc=%" PRId64 " supervisor=%d deadline_in=%.3fs",
					  s->l->b->proc, (int) s->me,
					  (double) (s->deadline - lease_clock_ns()) / NS_PER_SEC);
		}
		else if (errno == EINTR)
			continue;
		break;
	}
}

/*
 * The render failed, and the kernel OOM-killed part of its tree (with
 * proof): that is an OOM.  A render killed by anything else is not, and
 * one that succeeded all the same is not either (said in the log).
 */
static bool
kernel_oom(struct supervisor *s, bool failed)
{
	const struct booking *b = s->l->b;

	if (!memwatch_kernel_oom(&s->mem))
		return false;
	if (failed && s->killed_by == KILLED_NONE)
	{
		log_event("oom", "proc=%" PRId64 " frame=%" PRId64 " pid=%d by=kernel proof=\"%s\"",
				  b->proc, b->frame, (int) s->render, log_clean(s->mem.proof));
		return true;
	}
	log_event("warning", "proc=%" PRId64 " message=\"the kernel OOM-killed part of the render, which is not reported as an OOM: it %s\" proof=\"%s\"",
			  b->proc, failed ? "was killed for another reason first" : "succeeded all the same",
			  log_clean(s->mem.proof));
	return false;
}

/*
 * The render has exited and is still a zombie: its pid, and so its process
 * group's id, cannot have been reused yet.  Kill whatever it left in its
 * group (and in its cgroup) now, reap it, write the result and exit.  The
 * group is signalled before the reaping, not after it, because only then
 * is it sure to be the render's own: after, a new process could have
 * taken the pid and made a group of it (group_signal() would have to scan
 * /proc to rule that out, which costs a loaded host far more than the
 * render of a short frame).
 */
static void
end_render(struct supervisor *s)
{
	int			status;
	struct rusage ru;
	bool		failed,
				oom;
	int64_t		peak;

	kill(-s->render, SIGKILL);
	while (wait4(s->render, &status, 0, &ru) < 0 && errno == EINTR)
		;
	failed = WIFSIGNALED(status) || WEXITSTATUS(status) != 0;
	peak = memwatch_peak(&s->mem, (int64_t) ru.ru_maxrss * 1024);
	oom = s->killed_by == KILLED_MEMORY || kernel_oom(s, failed);
	memwatch_release(&s->mem);
	if (WIFSIGNALED(status))
		finish(s->l, 128 + WTERMSIG(status), WTERMSIG(status), peak, s->killed_by, oom);
	finish(s->l, WEXITSTATUS(status), 0, peak, s->killed_by, oom);
}

/*
 * If the render has ended, end the supervisor (end_render).  Orphans the
 * supervisor adopted are reaped and forgotten; each child that has exited
 * is looked at before it is reaped, so that the render is never reaped
 * here.
 */
static void
reap_render(struct supervisor *s)
{
	for (;;)
	{
		siginfo_t	si;

		memset(&si, 0, sizeof(si));
		if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0)
			return;
		if (si.si_pid == s->render)
			end_render(s);
		waitpid(si.si_pid, NULL, WNOHANG);
	}
}

/*
 * Measure the tree when a sample is due, and kill it at once if it uses
 * more than its limit.  A render already being killed for another reason
 * keeps that reason (and is not reported as an OOM), but its tree is
 * SIGKILLed all the same.  Returns when the next sample is due.
 */
static int64_t
watch_memory(struct supervisor *s, int64_t now)
{
	const struct booking *b = s->l->b;
	int64_t		used;

	if (now < s->next_sample)
		return s->next_sample;
	s->next_sample = now + MEMORY_SAMPLE_NS;
	used = memwatch_sample(&s->mem);
	if (s->memory_limit < 0 || used <= s->memory_limit || s->memory_killed ||
		render_exited(s->render))
		return s->next_sample;
	if (s->killed_by == KILLED_NONE)
	{
		s->killed_by = KILLED_MEMORY;
		log_event("oom", "proc=%" PRId64 " frame=%" PRId64 " pid=%d by=agent proof=\"the tree used %" PRId64 " bytes, more than its booking (%" PRId64 ") plus the host's unbooked memory (%" PRId64 ")\"",
				  b->proc, b->frame, (int) s->render, used, b->memory,
				  s->memory_limit - b->memory);
	}
	else
		log_event("warning", "proc=%" PRId64 " message=\"the tree used %" PRId64 " bytes, more than its limit (%" PRId64 "), while being killed (%s): SIGKILL\"",
				  b->proc, used, s->memory_limit, killed_by_name(s->killed_by));
	memwatch_kill_tree(&s->mem);
	s->memory_killed = true;
	s->term_sent = true;
	s->kill_sent = true;
	return s->next_sample;
}

/*
 * SIGTERM to the render's group, and SIGKILL a grace later (fence()).
 * SIGCONT follows the SIGTERM because a stopped render would otherwise
 * not act on it before the SIGKILL.
 */
static void
kill_render(struct supervisor *s, enum killed_by why, int64_t now)
{
	s->killed_by = why;
	kill(-s->render, SIGTERM);
	kill(-s->render, SIGCONT);
	s->term_sent = true;
	s->kill_at = now + s->grace;
}

/*
 * The fence: once the deadline has passed, the lease may be gone, and the
 * render must be dead before the server can give its frame to another
 * host.  Returns when the loop must next wake for the fence (the deadline
 * or the SIGKILL), or -1 if nothing is left to do but wait for the end.
 */
static int64_t
fence(struct supervisor *s, int64_t now)
{
	if (!s->term_sent && now >= s->deadline && !render_exited(s->render))
	{
		log_event("fenced", "proc=%" PRId64 " pid=%d supervisor=%d reason=\"lease deadline passed\" late=%.3fs",
				  s->l->b->proc, (int) s->render, (int) s->me,
				  (double) (now - s->deadline) / NS_PER_SEC);
		kill_render(s, KILLED_FENCE, now);
	}
	if (s->term_sent && !s->kill_sent && now >= s->kill_at)
	{
		kill(-s->render, SIGKILL);
		s->kill_sent = true;
	}

	if (!s->term_sent)
		return s->deadline;
	if (!s->kill_sent)
		return s->kill_at;
	return -1;
}

/*
 * Sleep until a signal, a message from the agent or the wake-up time (on
 * the lease clock; -1 for none).
 */
static void
sleep_until(const struct supervisor *s, int64_t wake, int64_t now)
{
	struct pollfd pfd[3];
	struct itimerspec its;
	uint64_t	ticks;
	int			np = 0;

	memset(&its, 0, sizeof(its));
	if (wake >= 0)
	{
		/* 0 would disarm it: a wake-up that is due fires in 1 ns */
		its.it_value.tv_sec = wake / NS_PER_SEC;
		its.it_value.tv_nsec = wake % NS_PER_SEC;
		if (wake <= 0)
			its.it_value.tv_nsec = 1;
	}
	if (s->timerfd >= 0)
		timerfd_settime(s->timerfd, TFD_TIMER_ABSTIME, &its, NULL);

	pfd[np].fd = s->sigfd;
	pfd[np].events = POLLIN;
	np++;
	if (s->timerfd >= 0)
	{
		pfd[np].fd = s->timerfd;
		pfd[np].events = POLLIN;
		np++;
	}
	if (s->pipe_open)
	{
		pfd[np].fd = s->pipe_fd;
		pfd[np].events = POLLIN;
		np++;
	}
	/* without a timer (cannot happen on Linux >= 3.15) poll's timeout it is */
	poll(pfd, (nfds_t) np,
		 wake < 0 || s->timerfd >= 0 ? -1 : (int) ((wake - now + 999999) / 1000000));
	if (s->timerfd >= 0)
		while (read(s->timerfd, &ticks, sizeof(ticks)) > 0)
			;
}

/*
 * SIGTERM to the supervisor is the agent asking for the render to be
 * killed.  Only the first counts, and none once the render has ended, so
 * that a late kill does not turn a render that finished into a killed one.
 */
static void
take_kill_requests(struct supervisor *s)
{
	struct signalfd_siginfo si;

	while (read(s->sigfd, &si, sizeof(si)) == sizeof(si))
	{
		if (si.ssi_signo != SIGTERM || s->term_sent || render_exited(s->render))
			continue;
		kill_render(s, KILLED_AGENT, lease_clock_ns());
	}
}

void
supervisor_main(const struct launch *l, int pipe_fd)
{
	struct supervisor s = {
		.l = l,
		.pipe_fd = pipe_fd,
		.pipe_open = true,
		.killed_by = KILLED_NONE
	};
	char		path[PATH_MAX];
	int			logfd;

	/* a session of its own: the agent's group, stop or death leave it alone */
	setsid();
	s.me = getpid();
	/* the render's orphans become ours, so they stay in the measured tree */
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	open_event_fds(&s);
	wait_for_go(&s);
	logfd = open_run_log(l, path, sizeof(path));
	refuse_early_kill(&s);
	start_render(&s, logfd, path);

	for (;;)
	{
		int64_t		now,
					wake,
					sample;

		read_deadlines(&s);
		reap_render(&s);
		now = lease_clock_ns();
		sample = watch_memory(&s, now);
		wake = fence(&s, now);
		if (wake < 0 || sample < wake)
			wake = sample;
		sleep_until(&s, wake, now);
		take_kill_requests(&s);
	}
}
