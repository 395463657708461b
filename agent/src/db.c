/*
 * db.c: the agent's one database connection.
 *
 * Every call goes over this one connection, in order (reserve and
 * heartbeat must not overlap: doc/release.md, "What agents must do").
 * Statements are sent asynchronously and waited for with a time limit, so
 * a server or network that stops answering costs a reconnect rather than a
 * hung agent; the connection is then closed, because the answer of the
 * statement in flight is unknown (every frameq call is safe to repeat or to
 * lose: see main.c).
 *
 * Connections are made with target_session_attrs=read-write and TCP
 * keepalives, settings the operator's conninfo may override; but whatever
 * the conninfo says, a server in recovery (a standby) is refused.  Each
 * connection also reads which version of the frameq extension its database
 * has, whether its heartbeat takes a report and its complete an oom flag,
 * and whether it has complete_many; main.c decides whether the agent speaks
 * it, and what it sends.
 *
 * db_exec_many sends several statements in one round trip as one
 * transaction: libpq's pipeline mode, whose statements up to the Sync run
 * in one implicit transaction that the server commits at the Sync, or
 * rolls back whole at the first error (the statements after it are not
 * run).  This rather than BEGIN ... COMMIT in one simple-query string: the
 * statements keep their parameters (the token is never spliced into SQL
 * text), each one's answer or error comes back on its own, and a failed
 * transaction needs no ROLLBACK round trip to leave the session usable.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "agent.h"

static PGconn *conn;
static void (*notify_handler) (const char *channel, const char *payload);

/* the frameq extension's version in the connected database; "" if none */
static char ext_version[64];
/* its heartbeat takes a report and its complete an oom flag */
static bool reports_taken;
/* it has complete_many(host, token, epoch, procs, ... oom[]) */
static bool batch_taken;

/*
 * The version, whether heartbeat(host, token, epoch, running, report) and
 * complete(..., max_rss, oom) are there, and whether complete_many(host,
 * token, epoch, procs, exit_statuses, exit_signals, max_rss, oom) is
 * (pg_extension and pg_proc are readable by all).
 */
#define VERSION_QUERY \
	"SELECT e.extversion, " \
	"(SELECT count(*) FROM pg_catalog.pg_proc p WHERE p.pronamespace = e.extnamespace " \
	"AND ((p.proname = 'heartbeat' AND p.pronargs = 5) " \
	"OR (p.proname = 'complete' AND p.pronargs = 8))) = 2, " \
	"EXISTS (SELECT FROM pg_catalog.pg_proc p WHERE p.pronamespace = e.extnamespace " \
	"AND p.proname = 'complete_many' AND p.pronargs = 8) " \
	"FROM pg_catalog.pg_extension e WHERE e.extname = 'frameq'"

static void
take_version(PGresult *res)
{
	bool		found = PQntuples(res) == 1;

	snprintf(ext_version, sizeof(ext_version), "%s", found ? PQgetvalue(res, 0, 0) : "");
	reports_taken = found && strcmp(PQgetvalue(res, 0, 1), "t") == 0;
	batch_taken = found && strcmp(PQgetvalue(res, 0, 2), "t") == 0;
}

void
db_set_notify_handler(void (*handler) (const char *channel, const char *payload))
{
	notify_handler = handler;
}

/*
 * Hand out the notifications libpq has read.  Called after every statement
 * too: what arrived while we waited for an answer is in libpq's buffer
 * already, and poll() on the socket would not wake for it.
 */
static void
drain_notifies(void)
{
	PGnotify   *n;

	while (conn && (n = PQnotifies(conn)) != NULL)
	{
		if (notify_handler)
			notify_handler(n->relname, n->extra);
		PQfreemem(n);
	}
}

bool
db_connected(void)
{
	return conn != NULL;
}

int
db_socket(void)
{
	return conn ? PQsocket(conn) : -1;
}

void
db_disconnect(const char *why)
{
	if (!conn)
		return;
	log_event("disconnected", "reason=\"%s\"", log_clean(why));
	PQfinish(conn);
	conn = NULL;
}

static void
notice_receiver(void *arg, const PGresult *res)
{
	(void) arg;
	log_event("server-notice", "message=\"%s\"", log_clean(PQresultErrorMessage(res)));
}

bool
db_connect(const char *conninfo, const char *host)
{
	char		app[160];
	PGresult   *res;
	bool		standby;

	/*
	 * Later entries override earlier ones, and the expanded dbname entry
	 * (the operator's conninfo) comes last: these are defaults only.
	 */
	const char *const keywords[] = {
		"connect_timeout", "keepalives", "keepalives_idle",
		"keepalives_interval", "keepalives_count", "tcp_user_timeout",
		"target_session_attrs", "application_name", "dbname", NULL
	};
	const char *values[] = {
		"5", "1", "5", "2", "3", "10000",
		"read-write", app, conninfo, NULL
	};

	if (conn)
		return true;
	snprintf(app, sizeof(app), "frameq-agent %s", host);
	conn = PQconnectdbParams(keywords, values, 1);
	if (!conn || PQstatus(conn) != CONNECTION_OK)
	{
		log_event("connect-failed", "error=\"%s\"",
				  log_clean(conn ? PQerrorMessage(conn) : "out of memory"));
		if (conn)
			PQfinish(conn);
		conn = NULL;
		return false;
	}
	PQsetNoticeReceiver(conn, notice_receiver, NULL);

	/* never act on a standby, whatever target_session_attrs said */
	res = PQexec(conn, "SELECT pg_catalog.pg_is_in_recovery()");
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		log_event("connect-failed", "error=\"%s\"", log_clean(PQresultErrorMessage(res)));
		PQclear(res);
		PQfinish(conn);
		conn = NULL;
		return false;
	}
	standby = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	if (standby)
	{
		log_event("connect-refused", "server=%s port=%s reason=\"the server is a standby\"",
				  PQhost(conn), PQport(conn));
		PQfinish(conn);
		conn = NULL;
		return false;
	}

	/* which frameq does this database have? */
	res = PQexec(conn, VERSION_QUERY);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		log_event("connect-failed", "error=\"%s\"", log_clean(PQresultErrorMessage(res)));
		PQclear(res);
		PQfinish(conn);
		conn = NULL;
		return false;
	}
	take_version(res);
	PQclear(res);
	if (PQsetnonblocking(conn, 1) != 0)
	{
		log_event("connect-failed", "error=\"cannot make the connection non-blocking\"");
		PQfinish(conn);
		conn = NULL;
		return false;
	}
	log_event("connected", "server=%s port=%s database=%s frameq=%s", PQhost(conn), PQport(conn),
			  log_clean(PQdb(conn)), ext_version[0] ? log_clean(ext_version) : "none");
	return true;
}

const char *
db_extension_version(void)
{
	return conn ? ext_version : "";
}

bool
db_reread_extension_version(int timeout_ms)
{
	PGresult   *res = db_exec(VERSION_QUERY, 0, NULL, timeout_ms, NULL);

	if (!res)
		return false;
	if (!db_ok(res))
	{
		log_event("warning", "message=\"cannot read the frameq extension's version: %s\"", db_error(res));
		PQclear(res);
		return false;
	}
	take_version(res);
	PQclear(res);
	return true;
}

bool
db_reports_taken(void)
{
	return conn && reports_taken;
}

bool
db_batch_taken(void)
{
	return conn && batch_taken;
}

bool
db_server_utf8(void)
{
	const char *enc = conn ? PQparameterStatus(conn, "server_encoding") : NULL;

	return enc && strcmp(enc, "UTF8") == 0;
}

const char *
db_database(void)
{
	return conn ? PQdb(conn) : "";
}

/* wait for the socket; false on timeout or error */
static bool
wait_socket(int events, int64_t deadline)
{
	for (;;)
	{
		struct pollfd p = {.fd = PQsocket(conn),.events = (short) events};
		int64_t		left = deadline - lease_clock_ns();
		int			rc;

		if (left <= 0)
			return false;
		rc = poll(&p, 1, (int) (left / 1000000) + 1);
		if (rc > 0)
			return true;
		if (rc < 0 && errno != EINTR)
			return false;
	}
}

/* send what libpq holds; false (disconnected) if that failed or took too long */
static bool
flush_out(int64_t deadline)
{
	int			rc;

	while ((rc = PQflush(conn)) == 1)
	{
		if (!wait_socket(POLLIN | POLLOUT, deadline) || !PQconsumeInput(conn))
		{
			db_disconnect("no answer in time (sending)");
			return false;
		}
	}
	if (rc < 0)
	{
		db_disconnect(PQerrorMessage(conn));
		return false;
	}
	return true;
}

/* wait until a result can be read without blocking; false: disconnected */
static bool
wait_result(int64_t deadline)
{
	while (PQisBusy(conn))
	{
		if (!wait_socket(POLLIN, deadline))
		{
			db_disconnect("no answer in time");
			return false;
		}
		if (!PQconsumeInput(conn))
		{
			db_disconnect(PQerrorMessage(conn));
			return false;
		}
	}
	return true;
}

/*
 * Read one statement's results, up to the NULL that ends them: the first
 * error, else the last result, in *out.  False if the connection failed or
 * gave no result (it is closed then).
 */
static bool
read_results(int64_t deadline, PGresult **out)
{
	PGresult   *res,
			   *last = NULL;

	for (;;)
	{
		if (!wait_result(deadline))
		{
			PQclear(last);
			return false;
		}
		res = PQgetResult(conn);
		if (!res)
			break;
		/* keep the first error, else the last result */
		if (last && PQresultStatus(last) == PGRES_FATAL_ERROR)
			PQclear(res);
		else
		{
			PQclear(last);
			last = res;
		}
	}
	if (PQstatus(conn) != CONNECTION_OK)
	{
		db_disconnect(last ? PQresultErrorMessage(last) : PQerrorMessage(conn));
		PQclear(last);
		return false;
	}
	if (!last)
	{
		db_disconnect("no result");
		return false;
	}
	*out = last;
	return true;
}

PGresult *
db_exec(const char *sql, int nparams, const char *const *params, int timeout_ms,
		int64_t *sent_at)
{
	int64_t		deadline;
	PGresult   *res;

	if (!conn)
		return NULL;
	/* the lease clock before the statement leaves: see the deadline in main.c */
	if (sent_at)
		*sent_at = lease_clock_ns();
	deadline = lease_clock_ns() + (int64_t) timeout_ms * 1000000;
	if (!PQsendQueryParams(conn, sql, nparams, NULL, params, NULL, NULL, 0))
	{
		db_disconnect(PQerrorMessage(conn));
		return NULL;
	}
	if (!flush_out(deadline) || !read_results(deadline, &res))
		return NULL;
	drain_notifies();
	return res;
}

bool
db_exec_many(int n, const struct db_stmt *stmts, int timeout_ms, PGresult **results)
{
	int64_t		deadline;
	PGresult   *sync;
	int			i;

	for (i = 0; i < n; i++)
		results[i] = NULL;
	if (!conn)
		return false;
	deadline = lease_clock_ns() + (int64_t) timeout_ms * 1000000;
	if (!PQenterPipelineMode(conn))
	{
		db_disconnect(PQerrorMessage(conn));
		return false;
	}
	for (i = 0; i < n; i++)
		if (!PQsendQueryParams(conn, stmts[i].sql, stmts[i].nparams, NULL, stmts[i].params,
							   NULL, NULL, 0))
		{
			db_disconnect(PQerrorMessage(conn));
			return false;
		}
	if (!PQpipelineSync(conn))
	{
		db_disconnect(PQerrorMessage(conn));
		return false;
	}
	if (!flush_out(deadline))
		return false;
	for (i = 0; i < n; i++)
		if (!read_results(deadline, &results[i]))
			goto lost;
	/* the Sync's own result: the transaction has ended (committed or not) */
	if (!wait_result(deadline))
		goto lost;
	sync = PQgetResult(conn);
	if (!sync || PQresultStatus(sync) != PGRES_PIPELINE_SYNC)
	{
		PQclear(sync);
		db_disconnect("no end of the pipeline");
		goto lost;
	}
	PQclear(sync);
	if (!PQexitPipelineMode(conn))
	{
		db_disconnect(PQerrorMessage(conn));
		goto lost;
	}
	drain_notifies();
	return true;

lost:
	for (i = 0; i < n; i++)
	{
		PQclear(results[i]);
		results[i] = NULL;
	}
	return false;
}

bool
db_ok(const PGresult *res)
{
	ExecStatusType s = PQresultStatus(res);

	return s == PGRES_TUPLES_OK || s == PGRES_COMMAND_OK;
}

const char *
db_sqlstate(const PGresult *res)
{
	const char *s = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	return s ? s : "";
}

const char *
db_error(const PGresult *res)
{
	const char *s = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);

	return log_clean(s ? s : PQresultErrorMessage(res));
}

void
db_clear(PGresult *res)
{
	PQclear(res);
}

int
db_ntuples(const PGresult *res)
{
	return PQntuples(res);
}

const char *
db_value(const PGresult *res, int row, int col)
{
	return PQgetvalue(res, row, col);
}

bool
db_isnull(const PGresult *res, int row, int col)
{
	return PQgetisnull(res, row, col);
}

bool
db_consume(void)
{
	if (!conn)
		return false;
	if (!PQconsumeInput(conn))
	{
		db_disconnect(PQerrorMessage(conn));
		return false;
	}
	drain_notifies();
	/* a FATAL from the server (shutdown, terminated session) ends up here */
	if (PQstatus(conn) != CONNECTION_OK)
	{
		db_disconnect(PQerrorMessage(conn));
		return false;
	}
	return true;
}

bool
db_listen(const char *channel)
{
	char	   *ident,
				sql[256];
	PGresult   *res;
	bool		ok;

	if (!conn)
		return false;
	ident = PQescapeIdentifier(conn, channel, strlen(channel));
	if (!ident)
		return false;
	snprintf(sql, sizeof(sql), "LISTEN %s", ident);
	PQfreemem(ident);
	res = db_exec(sql, 0, NULL, 10000, NULL);
	if (!res)
		return false;
	ok = db_ok(res);
	if (!ok)
		log_event("listen-failed", "channel=%s error=\"%s\"", channel, db_error(res));
	PQclear(res);
	return ok;
}
