/*
 * output.c: what a render has been writing, for the heartbeat's report.
 *
 * A render's stdout and stderr go straight to its log file (supervisor.c),
 * so the render never waits for the agent.  At each heartbeat the agent
 * reads what was added to the file since the last one and keeps, per run:
 *
 *   - idle: seconds since the file was last written (its mtime), so a
 *     render that has written nothing yet is idle since its start;
 *   - last_line: the last line that is not blank, where "\n" and "\r" both
 *     end a line (progress bars redraw with "\r"), and a line still being
 *     written counts; NUL bytes and invalid UTF-8 are dropped, and the first
 *     OUTPUT_LINE_CHARS characters kept;
 *   - progress: with the layer's progress_pattern (a POSIX extended regular
 *     expression; \d and \D are taken as [0-9] and [^0-9]), the number its
 *     first group matched on the last line that matched, if it is between 0
 *     and 100, rounded down to a whole percent.  A pattern that does not
 *     compile gives no progress, and is logged once.
 *
 * Only the first OUTPUT_LINE_MAX bytes of a line are looked at, and at most
 * OUTPUT_READ_MAX bytes per heartbeat: a render that wrote more since the
 * last one has its earlier output skipped.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"

#define OUTPUT_READ_MAX (4 * 1024 * 1024)

void
output_log_path(char *buf, size_t len, const char *log_dir, const struct booking *b)
{
	snprintf(buf, len, "%s/job%" PRId64 ".layer%" PRId64 ".frame%d.%" PRId64 ".log",
			 log_dir, b->job, b->layer, b->frame_number, b->proc);
}

/* ------------------------------------------------------------ the pattern */

/*
 * The pattern with \d and \D (outside bracket expressions) spelled as POSIX
 * bracket expressions, which is how users write percentages.  malloc'd.
 */
static char *
posix_pattern(const char *p)
{
	char	   *out = malloc(strlen(p) * 6 + 1),
			   *o = out;
	bool		in_bracket = false;

	for (; *p; p++)
	{
		if (in_bracket)
		{
			/* [:class:], [.coll.] and [=equiv=] hold a ']' of their own */
			if (p[0] == '[' && (p[1] == ':' || p[1] == '.' || p[1] == '='))
			{
				const char *end = strchr(p + 2, p[1]);

				while (end && end[1] != ']')
					end = strchr(end + 1, p[1]);
				if (end)
				{
					memcpy(o, p, (size_t) (end + 2 - p));
					o += end + 2 - p;
					p = end + 1;
					continue;
				}
			}
			if (*p == ']')
				in_bracket = false;
			*o++ = *p;
			continue;
		}
		if (p[0] == '\\' && (p[1] == 'd' || p[1] == 'D'))
		{
			o = stpcpy(o, p[1] == 'd' ? "[0-9]" : "[^0-9]");
			p++;
			continue;
		}
		if (p[0] == '\\' && p[1])
		{
			*o++ = *p++;
			*o++ = *p;
			continue;
		}
		*o++ = *p;
		if (*p == '[')
		{
			in_bracket = true;
			/* a ']' first (after any '^') is an ordinary character */
			if (p[1] == '^')
				*o++ = *++p;
			if (p[1] == ']')
				*o++ = *++p;
		}
	}
	*o = '\0';
	return out;
}

/* has this pattern's failure been logged already?  (the last few are kept) */
static bool
logged_before(const char *pattern)
{
	static char *logged[16];
	static int	next;

	for (int i = 0; i < 16; i++)
		if (logged[i] && strcmp(logged[i], pattern) == 0)
			return true;
	free(logged[next]);
	logged[next] = strdup(pattern);
	next = (next + 1) % 16;
	return false;
}

static void *
compile_pattern(const char *pattern, int64_t proc)
{
	regex_t    *re = malloc(sizeof(regex_t));
	char	   *posix = posix_pattern(pattern);
	int			rc = regcomp(re, posix, REG_EXTENDED);

	free(posix);
	if (rc == 0 && re->re_nsub >= 1)
		return re;
	if (!logged_before(pattern))
	{
		char		err[256];

		if (rc == 0)
			snprintf(err, sizeof(err), "it has no group");
		else
			regerror(rc, re, err, sizeof(err));
		log_event("warning", "proc=%" PRId64 " pattern=\"%s\" message=\"the layer's progress_pattern does not compile (%s): no progress is reported for its renders\"",
				  proc, log_clean(pattern), log_clean(err));
	}
	if (rc == 0)
		regfree(re);
	free(re);
	return NULL;
}

void
output_init(struct output *o, const char *path, const char *pattern, int64_t proc)
{
	memset(o, 0, sizeof(*o));
	o->path = strdup(path);
	o->progress = -1;
	if (pattern && pattern[0])
		o->regex = compile_pattern(pattern, proc);
}

void
output_free(struct output *o)
{
	if (o->regex)
	{
		regfree(o->regex);
		free(o->regex);
	}
	free(o->path);
	memset(o, 0, sizeof(*o));
}

/* ------------------------------------------------------------ lines */

/* length of the valid UTF-8 sequence at s (of n bytes); 0 if invalid */
static size_t
utf8_len(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	size_t		len;
	unsigned char lo = 0x80,
				hi = 0xBF;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		len = 2;
	else if (c >= 0xE0 && c <= 0xEF)
	{
		len = 3;
		if (c == 0xE0)
			lo = 0xA0;			/* no overlong forms */
		if (c == 0xED)
			hi = 0x9F;			/* no surrogates */
	}
	else if (c >= 0xF0 && c <= 0xF4)
	{
		len = 4;
		if (c == 0xF0)
			lo = 0x90;
		if (c == 0xF4)
			hi = 0x8F;			/* nothing past U+10FFFF */
	}
	else
		return 0;
	if (n < len || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xBF)
			return 0;
	return len;
}

/* the line without NUL bytes and invalid UTF-8, NUL-terminated in out */
static void
clean_line(const char *in, size_t n, char *out)
{
	const unsigned char *s = (const unsigned char *) in;
	size_t		o = 0;

	for (size_t i = 0; i < n;)
	{
		size_t		len = s[i] ? utf8_len(s + i, n - i) : 0;

		if (len == 0)
		{
			i++;
			continue;
		}
		memcpy(out + o, s + i, len);
		o += len;
		i += len;
	}
	out[o] = '\0';
}

/* the percentage the pattern's first group matched in line; -1 if none */
static int
match_progress(const regex_t *re, const char *line)
{
	regmatch_t	m[2];
	char		num[32],
			   *end;
	size_t		len;
	double		v;

	if (regexec(re, line, 2, m, 0) != 0 || m[1].rm_so < 0)
		return -1;
	len = (size_t) (m[1].rm_eo - m[1].rm_so);
	if (len == 0 || len >= sizeof(num))
		return -1;
	memcpy(num, line + m[1].rm_so, len);
	num[len] = '\0';
	v = strtod(num, &end);
	if (*end || end == num || !(v >= 0 && v <= 100))
		return -1;
	return (int) v;
}

/* a line has ended (or is shown while still being written) */
static void
take_line(struct output *o, const char *bytes, size_t n)
{
	char		line[OUTPUT_LINE_MAX + 1];
	size_t		chars = 0,
				i;
	int			p;

	clean_line(bytes, n, line);
	if (line[strspn(line, " \t\v\f")] == '\0')
		return;
	if (o->regex && (p = match_progress(o->regex, line)) >= 0)
		o->progress = p;
	/* the first OUTPUT_LINE_CHARS characters (lead bytes are not 10xxxxxx) */
	for (i = 0; line[i]; i++)
		if (((unsigned char) line[i] & 0xC0) != 0x80 && ++chars > OUTPUT_LINE_CHARS)
			break;
	memcpy(o->last_line, line, i);
	o->last_line[i] = '\0';
}

static void
feed(struct output *o, const char *buf, size_t n)
{
	for (size_t i = 0; i < n; i++)
	{
		char		c = buf[i];

		if (c == '\n' || c == '\r')
		{
			if (!o->skip_line)
				take_line(o, o->partial, o->plen);
			o->skip_line = false;
			o->plen = 0;
		}
		else if (!o->skip_line && o->plen < sizeof(o->partial))
			o->partial[o->plen++] = c;
	}
}

/*
 * Read what the file gained since the last call; false if it cannot be
 * read.  It is opened afresh each time: an agent with many renders holds
 * no descriptor per render.
 */
static bool
read_new(struct output *o, struct stat *st)
{
	char		buf[65536];
	int			fd = o->path ? open(o->path, O_RDONLY | O_CLOEXEC) : -1;

	if (fd < 0)
		return false;
	if (fstat(fd, st) != 0)
	{
		close(fd);
		return false;
	}
	if (st->st_size < o->offset)
	{
		/* truncated: start again */
		o->offset = 0;
		o->plen = 0;
		o->skip_line = false;
	}
	if (st->st_size - o->offset > OUTPUT_READ_MAX)
	{
		o->offset = st->st_size - OUTPUT_READ_MAX;
		o->plen = 0;
		o->skip_line = true;
	}
	while (o->offset < st->st_size)
	{
		size_t		want = (size_t) (st->st_size - o->offset) < sizeof(buf) ?
			(size_t) (st->st_size - o->offset) : sizeof(buf);
		ssize_t		n = pread(fd, buf, want, o->offset);

		if (n <= 0)
			break;
		o->offset += n;
		feed(o, buf, (size_t) n);
	}
	close(fd);
	/* a line still being written is the last line for now */
	if (o->plen > 0 && !o->skip_line)
		take_line(o, o->partial, o->plen);
	return true;
}

/* ------------------------------------------------------------ JSON */

static void
grow(char **s, size_t *len, size_t *cap, size_t more)
{
	if (*len + more + 1 > *cap)
	{
		*cap = (*len + more + 1) * 2;
		*s = realloc(*s, *cap);
	}
}

static void
append(char **s, size_t *len, size_t *cap, const char *fmt,...)
{
	va_list		ap;
	int			n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	grow(s, len, cap, (size_t) n);
	va_start(ap, fmt);
	vsnprintf(*s + *len, (size_t) n + 1, fmt, ap);
	va_end(ap);
	*len += (size_t) n;
}

/*
 * A JSON string of valid UTF-8 text, in ASCII only: other characters as
 * \u escapes (surrogate pairs past U+FFFF), so the server's encoding never
 * refuses it; a server whose encoding is not UTF8 gets '?' for them.
 */
static void
append_json_string(char **s, size_t *len, size_t *cap, const char *text, bool utf8)
{
	const unsigned char *p = (const unsigned char *) text,
			   *end = p + strlen(text);

	append(s, len, cap, "\"");
	while (p < end)
	{
		size_t		n = utf8_len(p, (size_t) (end - p));
		uint32_t	cp;

		if (n <= 1)
		{
			unsigned char c = *p++;

			if (c == '"' || c == '\\')
				append(s, len, cap, "\\%c", c);
			else if (c < 0x20 || c == 0x7F)
				append(s, len, cap, "\\u%04x", c);
			else if (c < 0x80)
				append(s, len, cap, "%c", c);
			continue;
		}
		cp = p[0] & (0xFF >> (n + 1));
		for (size_t i = 1; i < n; i++)
			cp = (cp << 6) | (p[i] & 0x3F);
		p += n;
		if (!utf8)
			append(s, len, cap, "?");
		else if (cp > 0xFFFF)
			append(s, len, cap, "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10),
				   0xDC00 + ((cp - 0x10000) & 0x3FF));
		else
			append(s, len, cap, "\\u%04x", cp);
	}
	append(s, len, cap, "\"");
}

bool
output_report(struct output *o, int64_t proc, bool utf8, char **json, size_t *len,
			  size_t *cap)
{
	struct stat st;
	struct timespec now;
	double		idle;

	if (!read_new(o, &st))
		return false;
	clock_gettime(CLOCK_REALTIME, &now);
	idle = (double) (now.tv_sec - st.st_mtim.tv_sec) +
		(double) (now.tv_nsec - st.st_mtim.tv_nsec) / NS_PER_SEC;
	append(json, len, cap, "%s{\"proc\":%" PRId64 ",\"idle\":%lld,\"last_line\":",
		   *len > 1 ? "," : "", proc, (long long) (idle > 0 ? idle : 0));
	if (o->last_line[0])
		append_json_string(json, len, cap, o->last_line, utf8);
	else
		append(json, len, cap, "null");
	if (o->progress >= 0)
		append(json, len, cap, ",\"progress\":%d}", o->progress);
	else
		append(json, len, cap, ",\"progress\":null}");
	return true;
}
