/*
 * statefile.c: the state directory, and finding processes in /proc.
 *
 * Files are "key=value" lines, written to a temporary name and renamed, so
 * a reader sees a whole file or none.  They are not fsync'd: they must
 * survive the agent, not the machine; after a crash of the machine its boot
 * id changes and attach() releases everything it had.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"

const char *
killed_by_name(enum killed_by k)
{
	switch (k)
	{
		case KILLED_NONE:
			return "none";
		case KILLED_AGENT:
			return "agent";
		case KILLED_FENCE:
			return "fence";
		case KILLED_ERROR:
			return "error";
		case KILLED_MEMORY:
			return "memory";
	}
	return "none";
}

static int
write_atomic(const char *dir, const char *name, const char *content)
{
	char		tmp[PATH_MAX],
				path[PATH_MAX];
	size_t		len = strlen(content);
	const char *p = content;
	int			fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(tmp, sizeof(tmp), "%s/.%s.%d.tmp", dir, name, (int) getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	while (len > 0)
	{
		ssize_t		w = write(fd, p, len);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
		{
			close(fd);
			unlink(tmp);
			return -1;
		}
		p += w;
		len -= (size_t) w;
	}
	if (close(fd) != 0 || rename(tmp, path) != 0)
	{
		unlink(tmp);
		return -1;
	}
	return 0;
}

static char *
read_small(const char *dir, const char *name)
{
	char		path[PATH_MAX];
	static char buf[4096];
	int			fd;
	ssize_t		n;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return NULL;
	buf[n] = '\0';
	return buf;
}

/* the value of key in a "key=value" text, as an integer */
static bool
get_int(const char *text, const char *key, int64_t *out)
{
	size_t		kl = strlen(key);
	const char *p = text;

	while (p && *p)
	{
		if (strncmp(p, key, kl) == 0 && p[kl] == '=')
		{
			char	   *end;

			errno = 0;
			*out = strtoll(p + kl + 1, &end, 10);
			return errno == 0 && end != p + kl + 1;
		}
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return false;
}

int
state_write_run(const char *dir, const struct run_record *r)
{
	char		name[64],
				buf[1024];

	snprintf(name, sizeof(name), "run.%" PRId64, r->proc);
	snprintf(buf, sizeof(buf),
			 "proc=%" PRId64 "\nepoch=%" PRId64 "\nframe=%" PRId64 "\njob=%" PRId64
			 "\nlayer=%" PRId64 "\nframe_number=%d\nsupervisor_pid=%d\n"
			 "supervisor_start=%llu\nrender_pid=%d\n",
			 r->proc, r->epoch, r->frame, r->job, r->layer, r->frame_number,
			 (int) r->sup_pid, r->sup_start, (int) r->render_pid);
	return write_atomic(dir, name, buf);
}

int
state_read_run(const char *dir, int64_t proc, struct run_record *r)
{
	char		name[64];
	char	   *t;
	int64_t		v;

	snprintf(name, sizeof(name), "run.%" PRId64, proc);
	if (!(t = read_small(dir, name)))
		return -1;
	memset(r, 0, sizeof(*r));
	r->proc = proc;
	if (!get_int(t, "epoch", &r->epoch))
		return -1;
	get_int(t, "frame", &r->frame);
	get_int(t, "job", &r->job);
	get_int(t, "layer", &r->layer);
	if (get_int(t, "frame_number", &v))
		r->frame_number = (int) v;
	if (get_int(t, "supervisor_pid", &v))
		r->sup_pid = (pid_t) v;
	if (get_int(t, "supervisor_start", &v))
		r->sup_start = (unsigned long long) v;
	if (get_int(t, "render_pid", &v))
		r->render_pid = (pid_t) v;
	return 0;
}

int
state_write_result(const char *dir, const struct result_record *r)
{
	char		name[64],
				buf[512];

	snprintf(name, sizeof(name), "result.%" PRId64, r->proc);
	snprintf(buf, sizeof(buf),
			 "proc=%" PRId64 "\nepoch=%" PRId64 "\nexit_status=%d\nexit_signal=%d\n"
			 "max_rss=%" PRId64 "\nkilled_by=%d\noom=%d\n",
			 r->proc, r->epoch, r->exit_status, r->exit_signal, r->max_rss,
			 (int) r->killed_by, r->oom ? 1 : 0);
	return write_atomic(dir, name, buf);
}

int
state_read_result(const char *dir, int64_t proc, struct result_record *r)
{
	char		name[64];
	char	   *t;
	int64_t		v;

	snprintf(name, sizeof(name), "result.%" PRId64, proc);
	if (!(t = read_small(dir, name)))
		return -1;
	memset(r, 0, sizeof(*r));
	r->proc = proc;
	r->max_rss = -1;
	if (!get_int(t, "epoch", &r->epoch) || !get_int(t, "exit_status", &v))
		return -1;
	r->exit_status = (int) v;
	if (get_int(t, "exit_signal", &v))
		r->exit_signal = (int) v;
	get_int(t, "max_rss", &r->max_rss);
	if (get_int(t, "killed_by", &v) && v >= KILLED_NONE && v <= KILLED_MEMORY)
		r->killed_by = (enum killed_by) v;
	/* written by an agent before 0.5.0: no oom line, no OOM */
	r->oom = get_int(t, "oom", &v) && v == 1;
	return 0;
}

void
state_remove(const char *dir, int64_t proc)
{
	char		path[PATH_MAX];

	/* the result first: a run file without a result means "maybe alive" */
	snprintf(path, sizeof(path), "%s/result.%" PRId64, dir, proc);
	unlink(path);
	snprintf(path, sizeof(path), "%s/run.%" PRId64, dir, proc);
	unlink(path);
}

int
state_list(const char *dir, int64_t **procs)
{
	DIR		   *d = opendir(dir);
	struct dirent *e;
	int			n = 0,
				cap = 16;

	*procs = malloc(sizeof(int64_t) * cap);
	if (!d)
		return 0;
	while ((e = readdir(d)) != NULL)
	{
		char	   *end;
		long long	v;

		if (strncmp(e->d_name, "run.", 4) != 0)
		{
			/* a temporary file of a writer that died half-way */
			if (e->d_name[0] == '.' && strstr(e->d_name, ".tmp"))
				unlinkat(dirfd(d), e->d_name, 0);
			continue;
		}
		errno = 0;
		v = strtoll(e->d_name + 4, &end, 10);
		if (errno || *end || end == e->d_name + 4)
			continue;
		if (n == cap)
			*procs = realloc(*procs, sizeof(int64_t) * (cap *= 2));
		(*procs)[n++] = v;
	}
	closedir(d);
	return n;
}

/*
 * Fields of /proc/<pid>/stat after the command name: state is field 3,
 * pgrp 5, session 6, starttime 22.
 */
static bool
read_stat(pid_t pid, char *state, pid_t *pgrp, pid_t *session,
		  unsigned long long *start)
{
	char		path[64],
				buf[1024];
	int			fd;
	ssize_t		n;
	char	   *p;
	int			field;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	if (!p)
		return false;
	p++;
	for (field = 3; *p; field++)
	{
		while (*p == ' ')
			p++;
		if (field == 3 && state)
			*state = *p;
		else if (field == 5 && pgrp)
			*pgrp = (pid_t) strtol(p, NULL, 10);
		else if (field == 6 && session)
			*session = (pid_t) strtol(p, NULL, 10);
		else if (field == 22)
		{
			if (start)
				*start = strtoull(p, NULL, 10);
			return true;
		}
		while (*p && *p != ' ')
			p++;
	}
	return false;
}

bool
proc_start_time(pid_t pid, unsigned long long *start)
{
	return read_stat(pid, NULL, NULL, NULL, start);
}

bool
proc_alive(pid_t pid, unsigned long long start)
{
	char		state = 0;
	unsigned long long s = 0;

	if (pid <= 0 || !read_stat(pid, &state, NULL, NULL, &s))
		return false;
	return s == start && state != 'Z' && state != 'X';
}

bool
group_alive(pid_t pgid, pid_t sid)
{
	DIR		   *d;
	struct dirent *e;
	bool		found = false;

	if (pgid <= 1)
		return false;
	d = opendir("/proc");
	if (!d)
		return kill(-pgid, 0) == 0;
	while (!found && (e = readdir(d)) != NULL)
	{
		char	   *end;
		long		pid = strtol(e->d_name, &end, 10);
		char		state = 0;
		pid_t		pg = 0,
					se = 0;

		if (*end || pid <= 0)
			continue;
		if (read_stat((pid_t) pid, &state, &pg, &se, NULL) &&
			pg == pgid && se == sid && state != 'Z' && state != 'X')
			found = true;
	}
	closedir(d);
	return found;
}

void
group_signal(pid_t pgid, pid_t sid, int sig)
{
	if (group_alive(pgid, sid))
		kill(-pgid, sig);
}
