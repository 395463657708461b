EXTENSION = frameq
EXTVERSION = $(shell grep default_version $(EXTENSION).control | sed -e "s/default_version[[:space:]]*=[[:space:]]*'\([^']*\)'/\1/")

MODULE_big = frameq
OBJS = \
	src/frameq.o \
	src/guc.o \
	src/ledger.o \
	src/lease.o \
	src/booking.o \
	src/dispatch.o \
	src/release.o \
	src/util.o \
	src/worker.o

# Released scripts are kept as they shipped; each upgrade step is built from
# its topic files in sql/<version>/ (name order), as pg_cron and Citus build
# theirs.  A fresh install runs 0.1.0 and then every step.
DATA = sql/$(EXTENSION)--0.1.0.sql
DATA_built = sql/$(EXTENSION)--0.1.0--0.2.0.sql sql/$(EXTENSION)--0.2.0--0.3.0.sql

sql/$(EXTENSION)--0.1.0--0.2.0.sql: $(sort $(wildcard sql/0.2.0/*.sql))
	cat $^ > $@
sql/$(EXTENSION)--0.2.0--0.3.0.sql: $(sort $(wildcard sql/0.3.0/*.sql))
	cat $^ > $@

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

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
#   make soak [DURATION=seconds] [SEED=n] [OUT=dir]
.PHONY: soak
soak: all install
	test/fault/run --soak $(if $(DURATION),--duration $(DURATION)) $(if $(SEED),--seed $(SEED)) $(if $(OUT),--out $(OUT))

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
