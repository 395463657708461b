EXTENSION = frameq
EXTVERSION = $(shell grep default_version $(EXTENSION).control | sed -e "s/default_version[[:space:]]*=[[:space:]]*'\([^']*\)'/\1/")

MODULE_big = frameq
OBJS = \
	src/frameq.o \
	src/guc.o \
	src/ledger.o \
	src/lease.o \
	src/limits.o \
	src/booking.o \
	src/depends.o \
	src/dispatch.o \
	src/exprcache.o \
	src/keys.o \
	src/release.o \
	src/rowread.o \
	src/util.o \
	src/worker.o

# The SQL, as pg_cron and Citus keep theirs (doc/design.md, "How it is
# built"):
# - the install script of the default version, sql/frameq--$(EXTVERSION).sql,
#   is built from the topic files in sql/src/, in the order below (each file
#   needs only what the ones before it define).  CREATE EXTENSION runs it
#   alone.  Each object is defined there once, as it is now.
# - each upgrade step is built from its pieces in sql/<version>/ (name
#   order).  ALTER EXTENSION UPDATE runs the steps from an installed version
#   on; a change to an object goes into its topic file and into a piece of
#   the next step, and test/scripts/upgrade_from_0.1.0.sh proves the two
#   give the same catalog.
# - the released 0.1.0 install script is kept as it shipped (the upgrade
#   test installs it).
SQL_SRC = $(addprefix sql/src/, \
	schema.sql \
	util.sql \
	procs.sql \
	locks.sql \
	dispatch.sql \
	admin.sql \
	submit.sql \
	agent.sql \
	operator.sql \
	depends.sql \
	worker.sql \
	views.sql \
	check.sql \
	dump.sql \
	grants.sql)

DATA = sql/$(EXTENSION)--0.1.0.sql
DATA_built = \
	sql/$(EXTENSION)--$(EXTVERSION).sql \
	sql/$(EXTENSION)--0.1.0--0.2.0.sql \
	sql/$(EXTENSION)--0.2.0--0.3.0.sql \
	sql/$(EXTENSION)--0.3.0--0.4.0.sql \
	sql/$(EXTENSION)--0.4.0--0.5.0.sql \
	sql/$(EXTENSION)--0.5.0--0.6.0.sql \
	sql/$(EXTENSION)--0.6.0--0.7.0.sql

sql/$(EXTENSION)--$(EXTVERSION).sql: $(SQL_SRC)
	cat $^ > $@
sql/$(EXTENSION)--0.1.0--0.2.0.sql: $(sort $(wildcard sql/0.2.0/*.sql))
	cat $^ > $@
sql/$(EXTENSION)--0.2.0--0.3.0.sql: $(sort $(wildcard sql/0.3.0/*.sql))
	cat $^ > $@
sql/$(EXTENSION)--0.3.0--0.4.0.sql: $(sort $(wildcard sql/0.4.0/*.sql))
	cat $^ > $@
sql/$(EXTENSION)--0.4.0--0.5.0.sql: $(sort $(wildcard sql/0.5.0/*.sql))
	cat $^ > $@
sql/$(EXTENSION)--0.5.0--0.6.0.sql: $(sort $(wildcard sql/0.6.0/*.sql))
	cat $^ > $@
sql/$(EXTENSION)--0.6.0--0.7.0.sql: $(sort $(wildcard sql/0.7.0/*.sql))
	cat $^ > $@

# `make installcheck`: pg_regress tests (test/regress/sql/*.sql) and
# isolation specs (test/isolation/specs/*.spec), run against a running
# server with frameq preloaded, found through PGHOST, PGPORT and PGUSER as
# usual.  The expected outputs of both live in expected/.  PostgreSQL 15's
# pg_regress has no --expecteddir, but it reads <outputdir>/expected/ before
# <inputdir>/expected/, so the output goes to the top directory (results/,
# regression.diffs) and the expected/ there is the one compared with.
#
# frameq runs in one database per server, the one named by frameq.database,
# and its background worker stays connected to it: pg_regress cannot drop
# and re-create a database of its own (`--use-existing`).  The tests run in
# that database, whose name is asked of the server unless FRAMEQ_TESTDB is
# given, and they drop and re-create the extension there: run them against
# a test server, never against a farm.
REGRESS = $(sort $(notdir $(basename $(wildcard test/regress/sql/*.sql))))
REGRESS_OPTS = --inputdir=test/regress --outputdir=. --use-existing
REGRESS_PREP = installcheck-database
ISOLATION = $(sort $(notdir $(basename $(wildcard test/isolation/specs/*.spec))))
ISOLATION_OPTS = --inputdir=test/isolation --outputdir=. --use-existing

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# `make` builds everything: without this the first rule above (the install
# script) would be the default goal
.DEFAULT_GOAL := all

# after the include: Makefile.global sets the pg_regress database names
FRAMEQ_TESTDB ?= $(shell $(bindir)/psql -X -A -t -q -d postgres -c 'SHOW frameq.database' 2>/dev/null)
CONTRIB_TESTDB = $(FRAMEQ_TESTDB)
ISOLATION_TESTDB = $(FRAMEQ_TESTDB)

.PHONY: installcheck-database
installcheck-database:
	@test -n "$(FRAMEQ_TESTDB)" || { \
		echo "installcheck: could not read frameq.database from the server: is it running, found by PGHOST/PGPORT, with frameq in shared_preload_libraries? (or give FRAMEQ_TESTDB=<database>)" >&2; \
		exit 1; }

# the README's main-job command: a throwaway farm running a job to completion
.PHONY: demo
demo:
	demo/run

# the benchmark suite (issue 6): `make bench` is its quick mode; bench/run
# --full for the complete figures (doc/benchmarks.md)
.PHONY: bench
bench:
	bench/run

# the long run of the fault-injection harness (doc/reliability.md), as root:
#   make soak [DURATION=seconds] [SEED=n] [OUT=dir] [HA=pg_auto_failover]
# HA=pg_auto_failover: the servers as a pg_auto_failover formation, whose
# manager does the failovers (doc/operations.md)
.PHONY: soak
soak: all install
	test/fault/run --soak $(if $(HA),--ha $(HA)) $(if $(DURATION),--duration $(DURATION)) $(if $(SEED),--seed $(SEED)) $(if $(OUT),--out $(OUT))

# ---- frameq-agent (agent/): the host agent, a program of its own, built
# with the extension (its own plain Makefile; PG_CFLAGS passes down).  Not
# installed by `make install`: see agent/README.md.
all: agent
clean: agent-clean
.PHONY: agent agent-clean
agent:
	$(MAKE) -C agent
agent-clean:
	$(MAKE) -C agent clean
