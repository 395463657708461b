/*
 * memory.c: how much memory a render's process tree uses, and whether the
 * kernel killed part of it for memory.
 *
 * The tree is the supervisor's descendants.  The supervisor is a child
 * subreaper (supervisor.c), so a process whose parent dies is reparented to
 * the supervisor, not to init, and stays in the tree even if it left the
 * render's process group.  The supervisor measures the tree every
 * MEMORY_SAMPLE_NS, in one of two ways:
 *
 *   - in a cgroup (v2, with the memory controller) of the render's own, when
 *     the agent may make one (memory_cgroup_base): memory.current less the
 *     file cache the kernel can take back (memory.stat's active_file and
 *     inactive_file); the peak reported at the end is the larger of what was
 *     sampled and the cgroup's memory.peak, which counts that cache too;
 *   - otherwise by walking /proc from the supervisor (the children files of
 *     /proc/<pid>/task/<tid>) and adding up the resident set (statm) of
 *     every process.  A process that lives only between two samples is not
 *     seen, and pages shared between processes count once per process.
 *
 * The rusage peak of the render's largest process is a floor under either.
 *
 * Proof that the kernel OOM-killed part of the tree: the cgroup's
 * memory.events oom_kill count grew, or the kernel log (/dev/kmsg, read from
 * where it stood when the render started) has an OOM killer's "Killed
 * process <pid>" record for a pid seen in the tree.  Only records the kernel
 * wrote count: /dev/kmsg gives records written from user space a facility
 * of their own, so a forged line proves nothing.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"

/* the most processes one sample walks */
#define TREE_MAX 4096

/* a small file whole, NUL-terminated; false if it cannot be read */
static bool
read_text(const char *path, char *buf, size_t len)
{
	int			fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t		n;

	if (fd < 0)
		return false;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return false;
	buf[n] = '\0';
	return true;
}

static bool
write_text(const char *path, const char *text)
{
	int			fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t		n;
	int			saved;

	if (fd < 0)
		return false;
	n = write(fd, text, strlen(text));
	saved = errno;
	close(fd);
	errno = saved;
	return n == (ssize_t) strlen(text);
}

/* is word one of the space-separated words of list? */
static bool
has_word(const char *list, const char *word)
{
	size_t		wl = strlen(word);

	for (const char *p = list; (p = strstr(p, word)) != NULL; p += wl)
		if ((p == list || isspace((unsigned char) p[-1])) &&
			(p[wl] == '\0' || isspace((unsigned char) p[wl])))
			return true;
	return false;
}

/* "key value" lines (memory.stat, memory.events): the value of key */
static bool
keyed_value(const char *text, const char *key, int64_t *out)
{
	size_t		kl = strlen(key);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (strncmp(p, key, kl) == 0 && p[kl] == ' ')
		{
			*out = strtoll(p + kl + 1, NULL, 10);
			return true;
		}
	return false;
}

/*
 * The directory of the agent's own cgroup in the cgroup v2 hierarchy: its
 * mount point (from mountinfo) joined with the path /proc/self/cgroup gives
 * for hierarchy 0.
 */
static bool
own_cgroup(char *dir, size_t len, char *why, size_t whylen)
{
	FILE	   *f = fopen("/proc/self/mountinfo", "re");
	char		line[4096],
				root[PATH_MAX] = "",
				mnt[PATH_MAX] = "",
				cg[PATH_MAX];
	const char *path = NULL;

	while (f && fgets(line, sizeof(line), f))
	{
		char	   *sep = strstr(line, " - ");

		if (sep && strncmp(sep + 3, "cgroup2 ", 8) == 0 &&
			sscanf(line, "%*s %*s %*s %4095s %4095s", root, mnt) == 2)
			break;
		mnt[0] = '\0';
	}
	if (f)
		fclose(f);
	if (!mnt[0])
	{
		snprintf(why, whylen, "no cgroup v2 hierarchy is mounted");
		return false;
	}
	if (!read_text("/proc/self/cgroup", cg, sizeof(cg)))
	{
		snprintf(why, whylen, "cannot read /proc/self/cgroup");
		return false;
	}
	for (char *p = cg; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (strncmp(p, "0::", 3) == 0)
		{
			path = p + 3;
			p[3 + strcspn(p + 3, "\n")] = '\0';
			break;
		}
	if (!path)
	{
		snprintf(why, whylen, "the agent is in no cgroup v2 (/proc/self/cgroup has no 0:: line)");
		return false;
	}
	/* a mount of part of the hierarchy (a container's): the path is below it */
	if (strcmp(root, "/") != 0)
	{
		size_t		rl = strlen(root);

		if (strncmp(path, root, rl) != 0 || (path[rl] != '/' && path[rl] != '\0'))
		{
			snprintf(why, whylen, "the agent's cgroup %s is outside the mounted %s", path, root);
			return false;
		}
		path += rl;
	}
	snprintf(dir, len, "%s%s", mnt, strcmp(path, "/") == 0 ? "" : path);
	return true;
}

/*
 * May the agent make a cgroup per render?  Only when it runs in a cgroup
 * of its own named "agent" (systemd: Delegate=yes, DelegateSubgroup=agent):
 * the render cgroups go beside it, in its parent, whose memory controller
 * it turns on for them (a cgroup with processes of its own could not hand
 * it on).  A probe cgroup is made and removed to be sure; empty render
 * cgroups an earlier agent left are removed.
 */
bool
memory_cgroup_base(char *base, size_t len, char *why, size_t whylen)
{
	char		own[PATH_MAX],
				path[PATH_MAX + 64],
				text[1024];
	char	   *slash;
	DIR		   *d;
	struct dirent *e;

	if (!own_cgroup(own, sizeof(own), why, whylen))
		return false;
	slash = strrchr(own, '/');
	if (!slash || strcmp(slash + 1, "agent") != 0)
	{
		snprintf(why, whylen, "the agent's cgroup %s is not one named agent (systemd: Delegate=yes and DelegateSubgroup=agent)",
				 own);
		return false;
	}
	*slash = '\0';
	snprintf(path, sizeof(path), "%s/cgroup.controllers", own);
	if (!read_text(path, text, sizeof(text)) || !has_word(text, "memory"))
	{
		snprintf(why, whylen, "no memory controller in %s", own);
		return false;
	}
	snprintf(path, sizeof(path), "%s/cgroup.subtree_control", own);
	if (!read_text(path, text, sizeof(text)) ||
		(!has_word(text, "memory") && !write_text(path, "+memory")))
	{
		snprintf(why, whylen, "cannot turn on the memory controller in %s: %s", own, strerror(errno));
		return false;
	}
	snprintf(path, sizeof(path), "%s/probe.%d", own, (int) getpid());
	if (mkdir(path, 0755) != 0)
	{
		snprintf(why, whylen, "cannot make a cgroup in %s: %s", own, strerror(errno));
		return false;
	}
	snprintf(path + strlen(path), sizeof(path) - strlen(path), "/memory.current");
	if (access(path, R_OK) != 0)
	{
		snprintf(why, whylen, "a cgroup made in %s has no memory.current", own);
		*strrchr(path, '/') = '\0';
		rmdir(path);
		return false;
	}
	*strrchr(path, '/') = '\0';
	rmdir(path);
	if ((d = opendir(own)) != NULL)
	{
		while ((e = readdir(d)) != NULL)
			if (strncmp(e->d_name, "render.", 7) == 0)
				unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
		closedir(d);
	}
	snprintf(base, len, "%s", own);
	return true;
}

/* (the kernel has CONFIG_PROC_CHILDREN or not: asked once per process) */
bool
memory_tree_walkable(void)
{
	static int	walkable = -1;
	char		path[64];

	if (walkable < 0)
	{
		snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int) getpid(), (int) getpid());
		walkable = access(path, R_OK) == 0;
	}
	return walkable == 1;
}

bool
memory_kmsg_readable(void)
{
	int			fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

/* ------------------------------------------------------------ the tree */

/* append the children of every thread of pid to out */
static void
add_children(pid_t pid, pid_t *out, int *n, int max)
{
	char		path[64];
	DIR		   *d;
	struct dirent *e;

	snprintf(path, sizeof(path), "/proc/%d/task", (int) pid);
	if (!(d = opendir(path)))
		return;
	while ((e = readdir(d)) != NULL && *n < max)
	{
		char		file[320];
		FILE	   *f;
		int			child;

		if (e->d_name[0] == '.')
			continue;
		snprintf(file, sizeof(file), "/proc/%d/task/%s/children", (int) pid, e->d_name);
		if (!(f = fopen(file, "re")))
			continue;
		while (*n < max && fscanf(f, "%d", &child) == 1)
			out[(*n)++] = (pid_t) child;
		fclose(f);
	}
	closedir(d);
}

/* every descendant of root (not root itself), breadth first */
static int
tree_pids(pid_t root, pid_t render, pid_t *out, int max)
{
	int			n = 0;

	if (!memory_tree_walkable())
	{
		/* no children files: the render's own process is all there is */
		if (render > 0 && kill(render, 0) == 0)
			out[n++] = render;
		return n;
	}
	add_children(root, out, &n, max);
	for (int i = 0; i < n; i++)
		add_children(out[i], out, &n, max);
	return n;
}

/* resident bytes of one process; 0 if it is gone */
static int64_t
rss_of(pid_t pid)
{
	char		path[64],
				text[256];
	long long	size,
				resident;

	snprintf(path, sizeof(path), "/proc/%d/statm", (int) pid);
	if (!read_text(path, text, sizeof(text)) ||
		sscanf(text, "%lld %lld", &size, &resident) != 2)
		return 0;
	return (int64_t) resident * sysconf(_SC_PAGESIZE);
}

static void
seen_add(struct memwatch *w, pid_t pid)
{
	for (int i = 0; i < w->nseen; i++)
		if (w->seen[i] == pid)
			return;
	/* full: forget the oldest half (they are long dead by now, or still seen) */
	if (w->nseen == MEMORY_SEEN_MAX)
	{
		memmove(w->seen, w->seen + MEMORY_SEEN_MAX / 2,
				sizeof(pid_t) * (MEMORY_SEEN_MAX / 2));
		w->nseen = MEMORY_SEEN_MAX / 2;
	}
	w->seen[w->nseen++] = pid;
}

static bool
seen_has(const struct memwatch *w, pid_t pid)
{
	for (int i = 0; i < w->nseen; i++)
		if (w->seen[i] == pid)
			return true;
	return pid == w->render;
}

/* ------------------------------------------------------------ the cgroup */

static bool
cgroup_read(const struct memwatch *w, const char *file, char *buf, size_t len)
{
	char		path[sizeof(w->cgroup) + 64];

	snprintf(path, sizeof(path), "%s/%s", w->cgroup, file);
	return read_text(path, buf, len);
}

static int64_t
cgroup_oom_kills(const struct memwatch *w)
{
	char		text[1024];
	int64_t		v = 0;

	if (w->cgroup[0] && cgroup_read(w, "memory.events", text, sizeof(text)))
		keyed_value(text, "oom_kill", &v);
	return v;
}

/* memory.current less the file cache the kernel can take back; -1 unknown */
static int64_t
cgroup_usage(const struct memwatch *w)
{
	char		text[8192];
	int64_t		current,
				active = 0,
				inactive = 0;

	if (!cgroup_read(w, "memory.current", text, sizeof(text)))
		return -1;
	current = strtoll(text, NULL, 10);
	if (cgroup_read(w, "memory.stat", text, sizeof(text)))
	{
		keyed_value(text, "active_file", &active);
		keyed_value(text, "inactive_file", &inactive);
	}
	return current - active - inactive > 0 ? current - active - inactive : 0;
}

/* ------------------------------------------------------------ the kernel log */

/*
 * Read the kernel log records that came since the last call.  An OOM
 * killer's "Killed process <pid>" for a pid of the tree is the proof; the
 * first one is kept.  Records are "<priority>,<seq>,<time>,<flags>;<text>";
 * the kernel's own have facility 0 (priority < 8).
 */
static void
kmsg_scan(struct memwatch *w)
{
	char		rec[8192];

	while (w->kmsg_fd >= 0)
	{
		ssize_t		n = read(w->kmsg_fd, rec, sizeof(rec) - 1);
		char	   *text,
				   *p;
		long		pri,
					pid;

		if (n < 0 && errno == EPIPE)
			continue;			/* records were overwritten: go on with the next */
		if (n <= 0)
			break;
		rec[n] = '\0';
		pri = strtol(rec, &p, 10);
		if (p == rec || *p != ',' || pri < 0 || pri >= 8 || !(text = strchr(rec, ';')))
			continue;
		text++;
		text[strcspn(text, "\n")] = '\0';
		if (!(p = strstr(text, "Killed process ")))
			continue;
		pid = strtol(p + 15, NULL, 10);
		if (pid > 0 && !w->proof[0] && seen_has(w, (pid_t) pid))
			snprintf(w->proof, sizeof(w->proof), "kernel log: %.200s", text);
	}
}

/* ------------------------------------------------------------ the watch */

bool
memwatch_prepare(struct memwatch *w, pid_t me, const char *base, int64_t proc)
{
	bool		ok = true;
	int			saved = 0;

	memset(w, 0, sizeof(*w));
	w->me = me;
	w->kmsg_fd = -1;
	if (base && base[0])
	{
		snprintf(w->cgroup, sizeof(w->cgroup), "%s/render.%" PRId64, base, proc);
		if (mkdir(w->cgroup, 0755) != 0 && errno != EEXIST)
		{
			saved = errno;
			w->cgroup[0] = '\0';
			ok = false;
		}
		w->oom_kills = cgroup_oom_kills(w);
	}
	w->kmsg_fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (w->kmsg_fd >= 0)
		lseek(w->kmsg_fd, 0, SEEK_END);
	errno = saved;
	return ok;
}

bool
memwatch_adopt(struct memwatch *w, pid_t render)
{
	char		path[sizeof(w->cgroup) + 32],
				pid[32];
	int			saved;

	w->render = render;
	seen_add(w, render);
	if (!w->cgroup[0])
		return true;
	snprintf(path, sizeof(path), "%s/cgroup.procs", w->cgroup);
	snprintf(pid, sizeof(pid), "%d", (int) render);
	if (write_text(path, pid))
		return true;
	saved = errno;
	rmdir(w->cgroup);
	w->cgroup[0] = '\0';
	errno = saved;
	return false;
}

int64_t
memwatch_sample(struct memwatch *w)
{
	pid_t		pids[TREE_MAX];
	int			n = tree_pids(w->me, w->render, pids, TREE_MAX);
	int64_t		sum = 0,
				cg;

	for (int i = 0; i < n; i++)
	{
		seen_add(w, pids[i]);
		sum += rss_of(pids[i]);
	}
	if (w->cgroup[0] && (cg = cgroup_usage(w)) >= 0)
		sum = cg;
	w->current = sum;
	if (sum > w->peak)
		w->peak = sum;
	kmsg_scan(w);
	return sum;
}

/* SIGKILL every process listed in the cgroup (no cgroup.kill before 5.14) */
static void
cgroup_kill(const struct memwatch *w)
{
	char		path[sizeof(w->cgroup) + 32];
	FILE	   *f;
	int			pid;

	if (!w->cgroup[0])
		return;
	snprintf(path, sizeof(path), "%s/cgroup.kill", w->cgroup);
	if (write_text(path, "1"))
		return;
	snprintf(path, sizeof(path), "%s/cgroup.procs", w->cgroup);
	if (!(f = fopen(path, "re")))
		return;
	while (fscanf(f, "%d", &pid) == 1)
		if (pid > 0)
			kill(pid, SIGKILL);
	fclose(f);
}

void
memwatch_kill_tree(struct memwatch *w)
{
	pid_t		pids[TREE_MAX];
	int			n;

	kill(-w->render, SIGKILL);
	n = tree_pids(w->me, w->render, pids, TREE_MAX);
	for (int i = 0; i < n; i++)
		kill(pids[i], SIGKILL);
	cgroup_kill(w);
}

int64_t
memwatch_peak(struct memwatch *w, int64_t floor)
{
	int64_t		peak = w->peak > floor ? w->peak : floor;
	char		text[64];

	if (w->cgroup[0] && cgroup_read(w, "memory.peak", text, sizeof(text)))
	{
		int64_t		p = strtoll(text, NULL, 10);

		if (p > peak)
			peak = p;
	}
	return peak;
}

bool
memwatch_kernel_oom(struct memwatch *w)
{
	int64_t		kills;

	kmsg_scan(w);
	if (!w->proof[0] && w->cgroup[0] && (kills = cgroup_oom_kills(w)) > w->oom_kills)
		snprintf(w->proof, sizeof(w->proof), "memory.events of cgroup %.160s: oom_kill %" PRId64 " -> %" PRId64,
				 strrchr(w->cgroup, '/') + 1, w->oom_kills, kills);
	return w->proof[0] != '\0';
}

void
memwatch_release(struct memwatch *w)
{
	if (w->kmsg_fd >= 0)
		close(w->kmsg_fd);
	w->kmsg_fd = -1;
	if (!w->cgroup[0])
		return;
	cgroup_kill(w);
	/* a cgroup can be removed once its processes have exited */
	for (int i = 0; i < 100 && rmdir(w->cgroup) != 0 && errno == EBUSY; i++)
	{
		struct timespec ts = {0, 10000000};

		nanosleep(&ts, NULL);
	}
}
