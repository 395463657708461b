# shellcheck shell=bash
# Sourced by test/scripts/worker_*.sh; not a test itself (test/run runs only
# the executable *.sh files here).  Gives:
#
#     need_debs PKG...        install those Debian packages that are missing
#     PY                      Debian's interpreter, where python3-psycopg2
#                             lives (not a pyenv shim)
#     PYTHONPATH              with this directory first, so that the Python
#                             parts can `import fqtest` (fqtest.py)
#     own_cluster PORT CONF   a cluster of the script's own, not test/run's:
#                             forgets test/run's, sets FRAMEQ_PORT and
#                             FRAMEQ_EXTRA_CONF and sources test/cluster.sh
#                             (cluster_start is up to the script)

_lib_worker_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

need_debs() {
	local need=() pkg
	for pkg in "$@"; do
		dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
	done
	if [[ ${#need[@]} -gt 0 ]]; then
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
	fi
}

# shellcheck disable=SC2034  # used by the scripts that source this file
PY=/usr/bin/python3
export PYTHONPATH="$_lib_worker_dir${PYTHONPATH:+:$PYTHONPATH}"

own_cluster() {
	unset FRAMEQ_CLUSTER_DIR FRAMEQ_PGDATA FRAMEQ_LOG
	export FRAMEQ_PORT=$1
	export FRAMEQ_EXTRA_CONF=$2
	# shellcheck source=../cluster.sh
	source "$_lib_worker_dir/../cluster.sh"
}
