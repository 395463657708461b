#!/usr/bin/env bash
# Throwaway PostgreSQL 15 cluster for frameq tests.
#
# As a library (the usual way; test/run does this):
#     source test/cluster.sh
#     cluster_start            # initdb + start + CREATE EXTENSION; exports PG* vars
#     ...                      # psql / pg_prove / pgbench just work (as root)
#     cluster_restart          # clean restart, data kept
#     cluster_crash_restart    # "pg_ctl stop -m immediate" + start => crash recovery
#     cluster_stop             # also runs automatically from an EXIT trap
#
# Standalone, for poking at things by hand:
#     eval "$(test/cluster.sh start)"   # prints export lines for your shell
#     test/cluster.sh stop
#
# Test scripts started by test/run inherit FRAMEQ_CLUSTER_DIR etc. and may
# source this file to call cluster_restart / cluster_crash_restart / cluster_psql
# on the shared cluster; they must not call cluster_stop.
#
# Knobs (environment):
#     FRAMEQ_PORT=54329          port (the socket lives in the temp dir, so the
#                                port only has to be unique per socket dir, but
#                                keeping it distinct from 5432 avoids confusion)
#     FRAMEQ_PGBIN=...           PostgreSQL bin dir (default: PG 15's)
#     FRAMEQ_PRELOAD=frameq      shared_preload_libraries; set '' to sanity-check
#                                the harness without a built extension
#     FRAMEQ_SKIP_EXTENSION=1    don't CREATE EXTENSION frameq (pgtap still is)
#     FRAMEQ_EXTRA_CONF='...'    extra postgresql.conf lines (newline separated)
#     FRAMEQ_KEEP_CLUSTER=1      cluster_stop stops the server but keeps the
#                                temp dir (data + server.log) for post-mortems
#
# Deliberately no "set -e" here: this file is sourced into other shells and
# must not change their error handling. Functions return non-zero instead.

: "${FRAMEQ_PORT:=54329}"
: "${FRAMEQ_PGBIN:=/usr/lib/postgresql/15/bin}"
: "${FRAMEQ_PRELOAD=frameq}"        # '=' not ':=' so an explicit '' is honoured
: "${FRAMEQ_SKIP_EXTENSION:=0}"
: "${FRAMEQ_DBNAME:=frameq_test}"

# State file for standalone "start"/"stop", which run in separate processes.
_frameq_state_file() { echo "${TMPDIR:-/tmp}/frameq-cluster.${FRAMEQ_PORT}.env"; }

_frameq_log() { echo "cluster: $*" >&2; }

# Servers refuse to run as root. cd into the cluster dir first so postgres
# never trips over an unreadable cwd (e.g. a root-only checkout).
_frameq_as_pg() {
    (cd "$FRAMEQ_CLUSTER_DIR" && runuser -u postgres -- "$@")
}

_frameq_pg_ctl() {
    _frameq_as_pg "$FRAMEQ_PGBIN/pg_ctl" -D "$FRAMEQ_PGDATA" -l "$FRAMEQ_LOG" "$@"
}

# Exported so child processes (pg_prove, pgbench, test scripts) see the same
# cluster. PGBIN goes first in PATH so we get the v15 client tools rather than
# Debian's pg_wrapper picking a version on its own.
_frameq_export_env() {
    export FRAMEQ_CLUSTER_DIR FRAMEQ_PGDATA FRAMEQ_LOG FRAMEQ_PORT FRAMEQ_PGBIN
    export FRAMEQ_CLUSTER_LIB="${BASH_SOURCE[0]}"
    export PGHOST="$FRAMEQ_CLUSTER_DIR"
    export PGPORT="$FRAMEQ_PORT"
    export PGUSER=postgres
    export PGDATABASE="$FRAMEQ_DBNAME"
    case ":$PATH:" in
        *":$FRAMEQ_PGBIN:"*) ;;
        *) export PATH="$FRAMEQ_PGBIN:$PATH" ;;
    esac
}

# Last lines of the server log; called whenever something went wrong, because
# the interesting error (bad preload library, bgworker crash) is only there.
cluster_log_tail() {
    local n="$1"
    if [[ -n "${FRAMEQ_LOG:-}" && -r "$FRAMEQ_LOG" ]]; then
        echo "----- last $n lines of $FRAMEQ_LOG -----" >&2
        tail -n "$n" "$FRAMEQ_LOG" >&2
        echo "----- end of server log -----" >&2
    fi
}

# True if the postmaster is up (not necessarily accepting connections yet).
cluster_running() {
    [[ -n "${FRAMEQ_PGDATA:-}" && -d "$FRAMEQ_PGDATA" ]] || return 1
    _frameq_pg_ctl status >/dev/null 2>&1
}

cluster_psql() {
    "$FRAMEQ_PGBIN/psql" -X -v ON_ERROR_STOP=1 -q "$@"
}

cluster_start() {
    # Reuse only a cluster this shell started itself. FRAMEQ_CLUSTER_DIR may be
    # inherited (e.g. from an eval'd standalone start, or test/run's env in a
    # test script); that cluster belongs to someone else.
    if [[ "${_FRAMEQ_OWNED:-0}" == 1 ]] && cluster_running; then
        _frameq_log "already running in $FRAMEQ_CLUSTER_DIR"
        _frameq_export_env
        return 0
    fi
    if [[ $(id -u) -ne 0 ]]; then
        _frameq_log "must run as root (servers are started via runuser -u postgres)"
        return 1
    fi

    FRAMEQ_CLUSTER_DIR=$(mktemp -d /tmp/frameq-XXXXXX) || return 1
    FRAMEQ_PGDATA="$FRAMEQ_CLUSTER_DIR/data"
    FRAMEQ_LOG="$FRAMEQ_CLUSTER_DIR/server.log"
    # Not exported: only this shell may stop/remove what it created.
    _FRAMEQ_OWNED=1
    export -n _FRAMEQ_OWNED
    chown postgres: "$FRAMEQ_CLUSTER_DIR" || return 1
    _frameq_export_env

    # Clean up even if the caller dies half-way. Standalone "start" must leave
    # the cluster running, hence the opt-out.
    if [[ "${_FRAMEQ_NO_TRAP:-0}" != 1 ]]; then
        trap cluster_stop EXIT
        trap 'exit 130' INT
        trap 'exit 143' TERM
    fi

    # C locale: deterministic sort order / messages in expected outputs.
    # --no-sync: the cluster is thrown away anyway.
    if ! _frameq_as_pg "$FRAMEQ_PGBIN/initdb" -D "$FRAMEQ_PGDATA" \
            --auth=trust -U postgres --encoding=UTF8 --locale=C --no-sync \
            >"$FRAMEQ_CLUSTER_DIR/initdb.log" 2>&1; then
        _frameq_log "initdb failed:"
        cat "$FRAMEQ_CLUSTER_DIR/initdb.log" >&2
        return 1
    fi

    # Appended after initdb's defaults, so these win.
    cat >>"$FRAMEQ_PGDATA/postgresql.conf" <<CONF

# ---- frameq test cluster (test/cluster.sh) ----
shared_preload_libraries = '$FRAMEQ_PRELOAD'
listen_addresses = ''
unix_socket_directories = '$FRAMEQ_CLUSTER_DIR'
port = $FRAMEQ_PORT
max_connections = 100
max_prepared_transactions = 10
frameq.database = '$FRAMEQ_DBNAME'
fsync = off
# the quarantine after start would hold every booking for a lease period;
# tests of the quarantine turn it back on
frameq.quarantine = off
log_min_messages = warning
CONF
    if [[ -n "${FRAMEQ_EXTRA_CONF:-}" ]]; then
        printf '%s\n' "$FRAMEQ_EXTRA_CONF" >>"$FRAMEQ_PGDATA/postgresql.conf"
    fi

    # Server stderr goes to $FRAMEQ_LOG via pg_ctl -l (appends across restarts).
    if ! _frameq_pg_ctl -w start >/dev/null; then
        _frameq_log "server failed to start"
        cluster_log_tail 50
        return 1
    fi

    if ! cluster_psql -d postgres -c "CREATE DATABASE $FRAMEQ_DBNAME"; then
        cluster_log_tail 50
        return 1
    fi
    local sql="CREATE EXTENSION pgtap;"
    [[ "$FRAMEQ_SKIP_EXTENSION" == 1 ]] || sql+=" CREATE EXTENSION frameq;"
    if ! cluster_psql -d "$FRAMEQ_DBNAME" -c "$sql"; then
        _frameq_log "extension setup failed"
        cluster_log_tail 50
        return 1
    fi
    _frameq_log "PostgreSQL running: PGHOST=$PGHOST PGPORT=$PGPORT dir=$FRAMEQ_CLUSTER_DIR"
}

# Idempotent: safe to call from the EXIT trap after an explicit call, or after
# a failed start. A no-op in shells that merely inherited the cluster (test
# scripts), so they cannot pull the shared cluster out from under test/run.
cluster_stop() {
    [[ "${_FRAMEQ_OWNED:-0}" == 1 && -n "${FRAMEQ_CLUSTER_DIR:-}" ]] || return 0
    if cluster_running; then
        _frameq_pg_ctl -w -m fast stop >/dev/null 2>&1 ||
            _frameq_pg_ctl -w -m immediate stop >/dev/null 2>&1
    fi
    if [[ "${FRAMEQ_KEEP_CLUSTER:-0}" == 1 ]]; then
        _frameq_log "kept $FRAMEQ_CLUSTER_DIR (FRAMEQ_KEEP_CLUSTER=1)"
    elif [[ "$FRAMEQ_CLUSTER_DIR" == /tmp/frameq-* ]]; then
        # Guarded by the prefix so a bogus inherited variable can't rm -rf
        # something else.
        rm -rf -- "$FRAMEQ_CLUSTER_DIR"
    fi
    unset FRAMEQ_CLUSTER_DIR FRAMEQ_PGDATA FRAMEQ_LOG _FRAMEQ_OWNED
    return 0
}

# Clean shutdown + start, data kept (e.g. persistence across restart).
cluster_restart() {
    if ! _frameq_pg_ctl -w -m fast restart >/dev/null; then
        _frameq_log "restart failed"
        cluster_log_tail 50
        return 1
    fi
}

# Simulated crash: no shutdown checkpoint, so the next start runs WAL replay.
cluster_crash_restart() {
    # A checkpoint first: the tests crash the server to lose its shared
    # memory, not to time a replay of every test's WAL since the last one
    # (over pg_ctl's minute on a loaded machine).  Up to 5 minutes to start.
    "$FRAMEQ_PGBIN/psql" -X -q -h "$FRAMEQ_CLUSTER_DIR" -p "$FRAMEQ_PORT" -U postgres \
        -d postgres -c CHECKPOINT >/dev/null 2>&1 || true
    _frameq_pg_ctl -m immediate stop >/dev/null || return 1
    if ! _frameq_pg_ctl -w -t 300 start >/dev/null; then
        _frameq_log "start after crash failed"
        cluster_log_tail 50
        return 1
    fi
}

# Start the existing data dir again (used by test/run if a test left the
# server down).
cluster_start_existing() {
    if ! _frameq_pg_ctl -w start >/dev/null; then
        cluster_log_tail 50
        return 1
    fi
}

# ---- standalone use ----
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    case "${1:-}" in
        start)
            state=$(_frameq_state_file)
            if [[ -e "$state" ]]; then
                _frameq_log "$state exists; run '$0 stop' first"
                exit 1
            fi
            _FRAMEQ_NO_TRAP=1
            # A half-started cluster would otherwise be left behind.
            cluster_start >&2 || { cluster_stop; exit 1; }
            {
                printf 'export FRAMEQ_CLUSTER_DIR=%q FRAMEQ_PGDATA=%q FRAMEQ_LOG=%q\n' \
                    "$FRAMEQ_CLUSTER_DIR" "$FRAMEQ_PGDATA" "$FRAMEQ_LOG"
                printf 'export FRAMEQ_PORT=%q FRAMEQ_PGBIN=%q\n' "$FRAMEQ_PORT" "$FRAMEQ_PGBIN"
                printf 'export PGHOST=%q PGPORT=%q PGUSER=postgres PGDATABASE=%q\n' \
                    "$PGHOST" "$PGPORT" "$PGDATABASE"
                printf 'export PATH=%q\n' "$PATH"
            } | tee "$state"
            ;;
        stop)
            state=$(_frameq_state_file)
            if [[ ! -e "$state" ]]; then
                _frameq_log "no cluster recorded in $state"
                exit 0
            fi
            # shellcheck disable=SC1090
            source "$state"
            _FRAMEQ_OWNED=1     # the state file is our proof of ownership
            cluster_stop
            rm -f -- "$state"
            ;;
        *)
            echo "usage: $0 start|stop   (or: source $0; cluster_start; ...)" >&2
            exit 2
            ;;
    esac
fi
