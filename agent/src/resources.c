/*
 * resources.c: what the machine has (cores, memory, GPUs).
 *
 * Cores are the CPUs this process may run on (its affinity mask, which
 * follows cpusets), memory is MemTotal, GPUs are what nvidia-smi lists if it
 * is on the PATH.  The agent offers these unless told to offer less.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"

static bool
on_path(const char *prog)
{
	const char *path = getenv("PATH");
	char		buf[4096];

	if (!path)
		path = "/usr/bin:/bin";
	while (*path)
	{
		size_t		n = strcspn(path, ":");

		snprintf(buf, sizeof(buf), "%.*s/%s", (int) n, path, prog);
		if (n > 0 && access(buf, X_OK) == 0)
			return true;
		path += n + (path[n] == ':');
	}
	return false;
}

void
resources_detect(struct resources *r)
{
	cpu_set_t	set;
	FILE	   *f;
	char		line[256];

	memset(r, 0, sizeof(*r));

	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		r->cores = CPU_COUNT(&set);
	if (r->cores <= 0)
		r->cores = (double) sysconf(_SC_NPROCESSORS_ONLN);
	if (r->cores <= 0)
		r->cores = 1;

	if ((f = fopen("/proc/meminfo", "r")) != NULL)
	{
		long long	kb;

		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "MemTotal: %lld kB", &kb) == 1)
			{
				r->memory = (int64_t) kb * 1024;
				break;
			}
		fclose(f);
	}
	if (r->memory <= 0)
		r->memory = (int64_t) sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE);

	/* one line per GPU, its memory in MiB */
	if (on_path("nvidia-smi") &&
		(f = popen("nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null",
				   "r")) != NULL)
	{
		while (fgets(line, sizeof(line), f))
		{
			long long	mib;

			if (sscanf(line, "%lld", &mib) == 1)
			{
				r->gpus++;
				r->gpu_memory += (int64_t) mib * 1024 * 1024;
			}
		}
		if (pclose(f) != 0)
		{
			r->gpus = 0;
			r->gpu_memory = 0;
		}
	}
}
