/*
 * config.c: the agent's options.
 *
 * Every option can be given on the command line (--name VALUE or
 * --name=VALUE), in the environment (FRAMEQ_NAME, dashes as underscores)
 * and in a config file (name = value, one per line, # comments).  The
 * command line wins over the environment, which wins over the file, which
 * wins over the defaults.  SIGHUP builds the whole thing again (main.c), so
 * the same precedence holds after a reload.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"

enum opt_type
{
	T_STR,
	T_CORES,
	T_SIZE,
	T_COUNT,
	T_SECONDS,
	T_MILLISECONDS,
	T_PERCENT,
	T_KILL_ON_TERM,
	T_FINISH_ON_TERM,
	T_ENFORCE_MEMORY,
	T_NO_ENFORCE_MEMORY,
	T_CONFIG,
	T_HELP,
	T_VERSION
};

struct opt_def
{
	const char *name;
	enum opt_type type;
	size_t		offset;			/* into struct config (not for flags) */
	const char *metavar;
	const char *deflt;			/* shown in --help */
	const char *help;
};

#define OFF(f) offsetof(struct config, f)

static const struct opt_def opts[] = {
	{"conninfo", T_STR, OFF(conninfo), "STR", "PG* environment",
	"libpq connection string; several hosts allowed (host=a,b); the agent adds\n"
	"target_session_attrs=read-write and never acts on a standby"},
	{"host", T_STR, OFF(host), "NAME", "this machine's host name",
	"the host's name as registered with frameq.register_host()"},
	{"token-file", T_STR, OFF(token_file), "PATH", "required",
	"file holding the host's token; refused unless only its owner may read it"},
	{"cores", T_CORES, OFF(cores), "N", "what the machine has",
	"cores offered (fractions allowed); the agent asks for work only while the\n"
	"bookings it runs use less"},
	{"memory", T_SIZE, OFF(memory), "SIZE", "what the machine has",
	"memory offered, bytes or with a unit (kB, MB, GB, TB; steps of 1024)"},
	{"gpus", T_COUNT, OFF(gpus), "N", "what nvidia-smi reports, else 0",
	"GPUs offered"},
	{"tags", T_STR, OFF(tags), "a,b", "none",
	"the host's tags, for the log (booking matches the registered tags)"},
	{"state-dir", T_STR, OFF(state_dir), "DIR", "/var/lib/frameq-agent",
	"where supervisors record their renders and results (local disk); a\n"
	"restarted agent reads it"},
	{"log-dir", T_STR, OFF(log_dir), "DIR", "/var/log/frameq-agent",
	"one file per run with the render's stdout and stderr"},
	{"work-dir", T_STR, OFF(work_dir), "DIR", "the agent's working directory",
	"where commands run (/bin/sh -c)"},
	{"kill-grace", T_SECONDS, OFF(kill_grace), "SECONDS", "5",
	"from SIGTERM to SIGKILL of a render's process group; renders are also\n"
	"told to stop this long before the lease runs out (at most a third of it)"},
	{"max-frames", T_COUNT, OFF(max_frames), "N", "0 (as many as fit)",
	"the most frames this host runs at once"},
	{"kill-on-term", T_KILL_ON_TERM, OFF(kill_on_term), NULL, NULL,
	"on SIGTERM kill the running frames, report, exit"},
	{"finish-on-term", T_FINISH_ON_TERM, OFF(kill_on_term), NULL, "this",
	"on SIGTERM stop booking, let the running frames finish, report, exit\n"
	"(a second SIGTERM kills them)"},
	{"reserve-interval", T_SECONDS, OFF(reserve_interval), "SECONDS", "2",
	"how long to wait after a reserve that found nothing (with room free)"},
	{"report-window", T_MILLISECONDS, OFF(report_window), "MS", "5",
	"how long (0 to 1000 ms) the report of a render's end waits for other\n"
	"renders of the host to end, to go with them in one transaction (with\n"
	"frameq 0.6.0: complete_many and the reserve of the room they freed);\n"
	"it waits only while another render runs"},
	{"enforce-memory", T_ENFORCE_MEMORY, OFF(enforce_memory), NULL, "this",
	"kill a render whose process tree uses more than its booking plus the\n"
	"host's unbooked memory (--memory less the bookings of the renders\n"
	"running), and report it as an OOM"},
	{"no-enforce-memory", T_NO_ENFORCE_MEMORY, OFF(enforce_memory), NULL, NULL,
	"measure renders' memory, but kill none for it"},
	{"fault-drop-reports", T_PERCENT, OFF(fault_drop_reports), "PERCENT", "0",
	"for fault-injection tests only: drop this percentage (0 to 100) of\n"
	"completion reports, chosen at random per attempt; half are not sent,\n"
	"half are sent but their answer is discarded and the connection closed;\n"
	"either way the report is sent again later"},
	{"config", T_CONFIG, OFF(config_file), "PATH", "none",
	"config file: lines of 'option = value' (option names as above)"},
	{"help", T_HELP, 0, NULL, NULL, "show this help and exit"},
	{"version", T_VERSION, 0, NULL, NULL, "show the version and exit"},
	{NULL, 0, 0, NULL, NULL, NULL}
};

/* a flag pair: "--x" alone on the command line, yes|no elsewhere */
static bool
is_flag(const struct opt_def *o)
{
	return o->type == T_KILL_ON_TERM || o->type == T_FINISH_ON_TERM ||
		o->type == T_ENFORCE_MEMORY || o->type == T_NO_ENFORCE_MEMORY;
}

static void
env_name(const struct opt_def *o, char *buf, size_t len)
{
	size_t		n = (size_t) snprintf(buf, len, "FRAMEQ_");

	for (const char *p = o->name; *p && n + 1 < len; p++)
		buf[n++] = (*p == '-') ? '_' : (char) toupper((unsigned char) *p);
	buf[n] = '\0';
}

const char *const *
config_env_names(void)
{
	static char names[32][40];
	static const char *list[33];

	if (list[0] == NULL)
	{
		int			n = 0;

		for (const struct opt_def *o = opts; o->name; o++)
		{
			if (o->type == T_HELP || o->type == T_VERSION)
				continue;
			env_name(o, names[n], sizeof(names[n]));
			list[n] = names[n];
			n++;
		}
		list[n] = NULL;
	}
	return list;
}

static const struct opt_def *
find_opt(const char *name, size_t len)
{
	for (const struct opt_def *o = opts; o->name; o++)
	{
		size_t		l = strlen(o->name);

		if (l != len)
			continue;
		/* accept underscores for dashes (config files written either way) */
		for (size_t i = 0; i < l; i++)
		{
			char		c = name[i] == '_' ? '-' : name[i];

			if (c != o->name[i])
				goto next;
		}
		return o;
next:
		;
	}
	return NULL;
}

static bool
parse_bool(const char *s, bool *out)
{
	if (!strcasecmp(s, "1") || !strcasecmp(s, "yes") || !strcasecmp(s, "true") ||
		!strcasecmp(s, "on"))
		*out = true;
	else if (!strcasecmp(s, "0") || !strcasecmp(s, "no") || !strcasecmp(s, "false") ||
			 !strcasecmp(s, "off"))
		*out = false;
	else
		return false;
	return true;
}

bool
parse_size(const char *s, int64_t *out)
{
	static const struct
	{
		const char *unit;
		int			shift;
	}			units[] = {
		{"", 0}, {"b", 0}, {"bytes", 0},
		{"k", 10}, {"kb", 10}, {"kib", 10},
		{"m", 20}, {"mb", 20}, {"mib", 20},
		{"g", 30}, {"gb", 30}, {"gib", 30},
		{"t", 40}, {"tb", 40}, {"tib", 40},
		{"p", 50}, {"pb", 50}, {"pib", 50},
	};
	char	   *end;
	double		v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || errno || v < 0 || !isfinite(v))
		return false;
	while (*end == ' ')
		end++;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
	{
		if (strcasecmp(end, units[i].unit) == 0)
		{
			v = v * (double) (1LL << units[i].shift);
			if (v > 9.0e18)
				return false;
			*out = (int64_t) llround(v);
			return true;
		}
	}
	return false;
}

static bool
parse_number(const char *s, double lo, double hi, double *out)
{
	char	   *end;
	double		v;

	errno = 0;
	v = strtod(s, &end);
	while (*end == ' ')
		end++;
	if (end == s || *end || errno || !isfinite(v) || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

/* apply one option value; from says where it came from (for messages) */
static bool
set_opt(struct config *cfg, const struct opt_def *o, const char *value,
		const char *from, char *err, size_t errlen)
{
	char	   *base = (char *) cfg;
	double		d;
	bool		b;

	switch (o->type)
	{
		case T_STR:
		case T_CONFIG:
			{
				char	  **p = (char **) (base + o->offset);

				free(*p);
				*p = strdup(value);
				return true;
			}
		case T_CORES:
			if (strcasecmp(value, "auto") == 0)
			{
				cfg->cores = 0;
				return true;
			}
			if (!parse_number(value, 0.01, 100000, &d))
				break;
			cfg->cores = d;
			return true;
		case T_SIZE:
			if (strcasecmp(value, "auto") == 0)
			{
				cfg->memory = 0;
				return true;
			}
			if (!parse_size(value, &cfg->memory) || cfg->memory <= 0)
				break;
			return true;
		case T_COUNT:
			if (o->offset == OFF(gpus) && strcasecmp(value, "auto") == 0)
			{
				cfg->gpus = -1;
				return true;
			}
			if (!parse_number(value, 0, INT_MAX, &d) || d != floor(d))
				break;
			if (o->offset == OFF(gpus))
				cfg->gpus = (int) d;
			else
				cfg->max_frames = (int) d;
			return true;
		case T_SECONDS:
			if (!parse_number(value, 0, 86400, &d))
				break;
			*(double *) (base + o->offset) = d;
			return true;
		case T_MILLISECONDS:
			if (!parse_number(value, 0, 1000, &d))
				break;
			*(double *) (base + o->offset) = d;
			return true;
		case T_PERCENT:
			if (!parse_number(value, 0, 100, &d))
				break;
			*(double *) (base + o->offset) = d;
			return true;
		case T_KILL_ON_TERM:
		case T_FINISH_ON_TERM:
			if (!parse_bool(value, &b))
				break;
			cfg->kill_on_term = (o->type == T_KILL_ON_TERM) ? b : !b;
			return true;
		case T_ENFORCE_MEMORY:
		case T_NO_ENFORCE_MEMORY:
			if (!parse_bool(value, &b))
				break;
			cfg->enforce_memory = (o->type == T_ENFORCE_MEMORY) ? b : !b;
			return true;
		case T_HELP:
		case T_VERSION:
			break;
	}
	snprintf(err, errlen, "invalid value for %s (%s): \"%s\"", o->name, from, value);
	return false;
}

static char *
trim(char *s)
{
	char	   *e;

	while (isspace((unsigned char) *s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char) e[-1]))
		*--e = '\0';
	return s;
}

static bool
read_config_file(struct config *cfg, const char *path, char *err, size_t errlen)
{
	FILE	   *f = fopen(path, "r");
	char		line[8192];
	int			lineno = 0;

	if (!f)
	{
		snprintf(err, errlen, "cannot open config file %s: %s", path, strerror(errno));
		return false;
	}
	while (fgets(line, sizeof(line), f))
	{
		char	   *s = trim(line),
				   *eq,
				   *key,
				   *val;
		const struct opt_def *o;
		char		from[PATH_MAX + 32];

		lineno++;
		if (*s == '\0' || *s == '#')
			continue;
		eq = strchr(s, '=');
		if (!eq)
		{
			snprintf(err, errlen, "%s:%d: expected 'option = value'", path, lineno);
			fclose(f);
			return false;
		}
		*eq = '\0';
		key = trim(s);
		val = trim(eq + 1);
		/* optional double quotes around the value */
		if (val[0] == '"' && strlen(val) >= 2 && val[strlen(val) - 1] == '"')
		{
			val[strlen(val) - 1] = '\0';
			val++;
		}
		o = find_opt(key, strlen(key));
		if (!o || o->type == T_HELP || o->type == T_VERSION || o->type == T_CONFIG)
		{
			snprintf(err, errlen, "%s:%d: unknown option \"%s\"", path, lineno, key);
			fclose(f);
			return false;
		}
		snprintf(from, sizeof(from), "%s:%d", path, lineno);
		if (!set_opt(cfg, o, val, from, err, errlen))
		{
			fclose(f);
			return false;
		}
	}
	fclose(f);
	return true;
}

static void
print_help(void)
{
	char		env[64];

	printf("Usage: frameq-agent [OPTION]...\n"
		   "The frameq host agent: runs the frames frameq books onto this host, each\n"
		   "under a supervisor that kills it when the host's lease runs out.\n\n"
		   "Options (each also settable as FRAMEQ_<OPTION> in the environment and as\n"
		   "'option = value' in the config file; the command line wins, then the\n"
		   "environment, then the file):\n");
	for (const struct opt_def *o = opts; o->name; o++)
	{
		char		head[128];
		const char *h;

		snprintf(head, sizeof(head), "  --%s%s%s", o->name,
				 o->metavar ? " " : "", o->metavar ? o->metavar : "");
		printf("%s\n", head);
		for (h = o->help; *h;)
		{
			const char *nl = strchr(h, '\n');
			int			n = nl ? (int) (nl - h) : (int) strlen(h);

			printf("        %.*s\n", n, h);
			h += n + (nl ? 1 : 0);
		}
		if (o->type != T_HELP && o->type != T_VERSION)
		{
			env_name(o, env, sizeof(env));
			if (is_flag(o))
				printf("        env %s=yes|no%s\n", env,
					   o->deflt ? " (the default)" : "");
			else
				printf("        env %s; default: %s\n", env, o->deflt);
		}
	}
	printf("\nSignals: SIGTERM/SIGINT stop cleanly (exit 0), SIGHUP reloads the config.\n");
}

static void
set_defaults(struct config *cfg)
{
	char		buf[HOST_NAME_MAX + 1];
	char		cwd[PATH_MAX];

	memset(cfg, 0, sizeof(*cfg));
	if (gethostname(buf, sizeof(buf)) != 0)
		strcpy(buf, "localhost");
	buf[sizeof(buf) - 1] = '\0';
	cfg->conninfo = strdup("");
	cfg->host = strdup(buf);
	cfg->token_file = strdup("");
	cfg->cores = 0;
	cfg->memory = 0;
	cfg->gpus = -1;
	cfg->tags = strdup("");
	cfg->state_dir = strdup("/var/lib/frameq-agent");
	cfg->log_dir = strdup("/var/log/frameq-agent");
	cfg->work_dir = strdup(getcwd(cwd, sizeof(cwd)) ? cwd : "/");
	cfg->kill_grace = 5;
	cfg->max_frames = 0;
	cfg->kill_on_term = false;
	cfg->reserve_interval = 2;
	cfg->report_window = 5;
	cfg->fault_drop_reports = 0;
	cfg->enforce_memory = true;
	cfg->config_file = strdup("");
}

void
config_free(struct config *cfg)
{
	free(cfg->conninfo);
	free(cfg->host);
	free(cfg->token_file);
	free(cfg->tags);
	free(cfg->state_dir);
	free(cfg->log_dir);
	free(cfg->work_dir);
	free(cfg->config_file);
	memset(cfg, 0, sizeof(*cfg));
}

/* split "--name=value" / "--name value"; returns the option or NULL */
static const struct opt_def *
arg_opt(int argc, char **argv, int *i, const char **value, char *err, size_t errlen)
{
	const char *a = argv[*i];
	const char *name,
			   *eq;
	const struct opt_def *o;

	*value = NULL;
	if (strcmp(a, "-h") == 0)
		return find_opt("help", 4);
	if (strncmp(a, "--", 2) != 0)
	{
		snprintf(err, errlen, "unexpected argument \"%s\" (see --help)", a);
		return NULL;
	}
	name = a + 2;
	eq = strchr(name, '=');
	o = find_opt(name, eq ? (size_t) (eq - name) : strlen(name));
	if (!o)
	{
		snprintf(err, errlen, "unknown option \"%s\" (see --help)", a);
		return NULL;
	}
	if (eq)
		*value = eq + 1;
	else if (o->metavar)
	{
		if (*i + 1 >= argc)
		{
			snprintf(err, errlen, "option --%s needs a value", o->name);
			return NULL;
		}
		*value = argv[++*i];
	}
	return o;
}

/*
 * The first pass over the command line: --help and --version answer at
 * once (1), and --config must be known before anything else is read,
 * because the file has the lowest precedence and is read first.  Returns
 * 0 with *cfile set (or left alone), 1 if answered, -1 on an error.
 */
static int
early_options(int argc, char **argv, const char **cfile, char *err, size_t errlen)
{
	for (int i = 1; i < argc; i++)
	{
		const char *v;
		const struct opt_def *o = arg_opt(argc, argv, &i, &v, err, errlen);

		if (!o)
			return -1;
		if (o->type == T_HELP)
		{
			print_help();
			return 1;
		}
		if (o->type == T_VERSION)
		{
			printf("frameq-agent %s\n", AGENT_VERSION);
			return 1;
		}
		if (o->type == T_CONFIG)
			*cfile = v;
	}
	return 0;
}

/* Every FRAMEQ_<OPTION> that is set and not empty. */
static bool
read_environment(struct config *cfg, char *err, size_t errlen)
{
	char		env[64];

	for (const struct opt_def *o = opts; o->name; o++)
	{
		const char *v;

		if (o->type == T_HELP || o->type == T_VERSION || o->type == T_CONFIG)
			continue;
		env_name(o, env, sizeof(env));
		v = getenv(env);
		if (v && v[0] && !set_opt(cfg, o, v, env, err, errlen))
			return false;
	}
	return true;
}

/*
 * The command line, read last so that it wins.  --kill-on-term,
 * --finish-on-term, --enforce-memory and --no-enforce-memory are flags
 * there ("yes" unless given a value).
 */
static bool
read_command_line(struct config *cfg, int argc, char **argv, char *err, size_t errlen)
{
	for (int i = 1; i < argc; i++)
	{
		const char *v;
		const struct opt_def *o = arg_opt(argc, argv, &i, &v, err, errlen);

		if (!o)
			return false;
		if (o->type == T_CONFIG)
			continue;
		if (is_flag(o))
		{
			if (!set_opt(cfg, o, v ? v : "yes", "command line", err, errlen))
				return false;
			continue;
		}
		if (!set_opt(cfg, o, v, "command line", err, errlen))
			return false;
	}
	return true;
}

/*
 * What the rest of the agent relies on.  The host name follows the
 * server's rule for names (doc/reference.md), so that a name no host can
 * have is refused at start rather than at every attach, and so that it
 * can go into log lines unquoted.
 */
static bool
check_config(struct config *cfg, char *err, size_t errlen)
{
	if (!cfg->host[0] || strlen(cfg->host) > 100 ||
		strspn(cfg->host, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
			   "0123456789_.:@+-") != strlen(cfg->host))
	{
		snprintf(err, errlen, "invalid --host \"%s\" (1 to 100 of A-Z a-z 0-9 _ . : @ + -)",
				 cfg->host);
		return false;
	}
	if (!cfg->token_file[0])
	{
		snprintf(err, errlen, "--token-file is required (see --help)");
		return false;
	}
	if (!cfg->state_dir[0] || !cfg->log_dir[0] || !cfg->work_dir[0])
	{
		snprintf(err, errlen, "--state-dir, --log-dir and --work-dir must not be empty");
		return false;
	}
	if (cfg->reserve_interval < 0.01)
		cfg->reserve_interval = 0.01;
	return true;
}

/*
 * Build the configuration: the defaults, then the config file, the
 * environment and the command line, each overriding what came before.
 */
int
config_load(struct config *cfg, int argc, char **argv, char *err, size_t errlen)
{
	const char *cfile = getenv("FRAMEQ_CONFIG");
	int			rc;

	set_defaults(cfg);
	if ((rc = early_options(argc, argv, &cfile, err, errlen)) != 0)
		return rc;
	if (cfile && cfile[0])
	{
		free(cfg->config_file);
		cfg->config_file = strdup(cfile);
		if (!read_config_file(cfg, cfile, err, errlen))
			return -1;
	}
	if (!read_environment(cfg, err, errlen) ||
		!read_command_line(cfg, argc, argv, err, errlen) ||
		!check_config(cfg, err, errlen))
		return -1;
	return 0;
}

char *
config_read_token(const char *path, char *err, size_t errlen)
{
	int			fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	struct stat st;
	char		buf[4097];
	ssize_t		n;
	char	   *t;

	if (fd < 0)
	{
		snprintf(err, errlen, "cannot open token file %s: %s", path, strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
	{
		snprintf(err, errlen, "token file %s is not a regular file", path);
		close(fd);
		return NULL;
	}
	/* the token is the host's password: nobody but its owner may see it */
	if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
	{
		snprintf(err, errlen,
				 "token file %s has mode %04o: it must be readable only by its owner "
				 "(chmod 600 %s)", path, (unsigned) (st.st_mode & 07777), path);
		close(fd);
		return NULL;
	}
	if (st.st_uid != geteuid() && st.st_uid != 0)
	{
		snprintf(err, errlen, "token file %s belongs to uid %u, not to the agent's user (%u) or root",
				 path, (unsigned) st.st_uid, (unsigned) geteuid());
		close(fd);
		return NULL;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
	{
		snprintf(err, errlen, "cannot read token file %s: %s", path, strerror(errno));
		return NULL;
	}
	buf[n] = '\0';
	t = trim(buf);
	t[strcspn(t, "\r\n")] = '\0';
	if (!t[0])
	{
		snprintf(err, errlen, "token file %s is empty", path);
		return NULL;
	}
	return strdup(t);
}
