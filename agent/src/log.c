/*
 * log.c: the agent's event log and its lease clock.
 *
 * Every event is one line on stdout, "<time> <event> <key=value ...>", the
 * time in ISO 8601 UTC with milliseconds.  Each line goes out in one
 * write(), so the lines of the agent and of its supervisors (which share
 * stdout) never interleave inside a line.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"

int64_t
lease_clock_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (int64_t) ts.tv_sec * NS_PER_SEC + ts.tv_nsec;
}

const char *
log_clean(const char *s)
{
	static char ring[4][1024];
	static int	next;
	char	   *out = ring[next++ % 4];
	size_t		n = 0;

	if (!s)
		return "";
	while (*s == ' ' || *s == '\t' || *s == '\n')
		s++;
	for (; *s && n < sizeof(ring[0]) - 1; s++)
	{
		char		c = *s;

		if (c == '"')
			c = '\'';
		else if (c == '\n' || c == '\r' || c == '\t')
			c = ' ';
		/* no runs of blanks */
		if (c == ' ' && n > 0 && out[n - 1] == ' ')
			continue;
		out[n++] = c;
	}
	while (n > 0 && out[n - 1] == ' ')
		n--;
	out[n] = '\0';
	return out;
}

void
log_event(const char *event, const char *fmt,...)
{
	char		line[16384];
	struct timespec ts;
	struct tm	tm;
	size_t		n;
	va_list		ap;
	const char *p;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
	n += snprintf(line + n, sizeof(line) - n, ".%03ldZ %s",
				  ts.tv_nsec / 1000000, event);
	if (fmt && fmt[0] && n < sizeof(line) - 1)
	{
		line[n++] = ' ';
		va_start(ap, fmt);
		vsnprintf(line + n, sizeof(line) - n, fmt, ap);
		va_end(ap);
		n = strlen(line);
	}
	/* one event, one line: fold anything multi-line (server messages) */
	for (size_t i = 0; i < n; i++)
		if (line[i] == '\n' || line[i] == '\r')
			line[i] = ' ';
	while (n > 0 && line[n - 1] == ' ')
		n--;
	if (n >= sizeof(line) - 1)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	p = line;
	while (n > 0)
	{
		ssize_t		w = write(STDOUT_FILENO, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		p += w;
		n -= (size_t) w;
	}
}
