# shellcheck shell=bash
# Sourced by bench/run, bench/combined.sh and bench/instructions.sh.
#
#     bench_pgroot    with FRAMEQ_PGROOT set: a private copy of Debian's
#                     PostgreSQL 15 there (made once, as test/run makes
#                     one), and FRAMEQ_PGBIN pointing at its binaries;
#                     without it, nothing (the system's server is used)
bench_pgroot() {
	[[ -n ${FRAMEQ_PGROOT:-} ]] || return 0
	if [[ ! -x $FRAMEQ_PGROOT/usr/lib/postgresql/15/bin/postgres ]]; then
		mkdir -p "$FRAMEQ_PGROOT/usr/lib/postgresql" "$FRAMEQ_PGROOT/usr/share/postgresql"
		cp -a /usr/lib/postgresql/15 "$FRAMEQ_PGROOT/usr/lib/postgresql/"
		cp -a /usr/share/postgresql/15 "$FRAMEQ_PGROOT/usr/share/postgresql/"
	fi
	export FRAMEQ_PGBIN="$FRAMEQ_PGROOT/usr/lib/postgresql/15/bin"
}
