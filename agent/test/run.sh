#!/usr/bin/env bash
# frameq-agent's tests.  Run as root, after `make && make install` at the top
# of the repository (the tests start their own clusters with the installed
# extension):
#
#     agent/test/run.sh                  # every test
#     agent/test/run.sh t_kill_frame     # some (names or paths)
#
# Builds the agent first.  Each test (agent/test/t_*.sh) is a bash script
# that starts its own throwaway cluster on its own port and exits 0 on
# success; its output is shown when it fails.  Ends with exactly one line
#     N passed, N failed
# Exit status 0 only if nothing failed and at least one test ran.
#
# Knobs: FRAMEQ_AGENT_TEST_PORT=55410 (first port; test i uses port + 2*i),
#        FRAMEQ_AGENT_TEST_TIMEOUT=300 (seconds per test),
#        FRAMEQ_KEEP_TEST=1 (keep each test's scratch dir).
set -u
here=$(cd "$(dirname "$(realpath -- "$0")")" && pwd)
agent=$(dirname "$here")

if [[ $(id -u) -ne 0 ]]; then
	echo "agent/test/run.sh must run as root (test clusters are started via runuser)" >&2
	exit 2
fi
if ! make -s -C "$agent" >/dev/null; then
	echo "building the agent failed" >&2
	echo
	echo "0 passed, 1 failed"
	exit 1
fi

tests=()
if [[ $# -eq 0 ]]; then
	for f in "$here"/t_*.sh; do tests+=("$f"); done
else
	for a in "$@"; do
		if [[ -f $a ]]; then tests+=("$(realpath -- "$a")")
		elif [[ -f $here/$a ]]; then tests+=("$here/$a")
		elif [[ -f $here/$a.sh ]]; then tests+=("$here/$a.sh")
		else echo "no such test: $a" >&2; exit 2
		fi
	done
fi

: "${FRAMEQ_AGENT_TEST_PORT:=55410}"
: "${FRAMEQ_AGENT_TEST_TIMEOUT:=300}"
passed=0
failed=0
failed_names=()
out=$(mktemp /tmp/frameq-agent-test-out.XXXXXX)
trap 'rm -f "$out"' EXIT

i=0
for t in "${tests[@]}"; do
	name=$(basename "$t" .sh)
	start=$SECONDS
	FRAMEQ_PORT=$((FRAMEQ_AGENT_TEST_PORT + 2 * i)) \
		timeout -k 10 "$FRAMEQ_AGENT_TEST_TIMEOUT" bash "$t" >"$out" 2>&1 </dev/null
	rc=$?
	i=$((i + 1))
	secs=$((SECONDS - start))
	if [[ $rc -eq 0 ]]; then
		echo "ok   $name (${secs}s)"
		passed=$((passed + 1))
	else
		[[ $rc -eq 124 ]] && note=", timed out" || note=""
		echo "FAIL $name (${secs}s$note)"
		echo "----- output of $name -----"
		cat "$out"
		echo "----- end of $name -----"
		failed=$((failed + 1))
		failed_names+=("$name")
	fi
done

if [[ ${#failed_names[@]} -gt 0 ]]; then
	echo
	echo "Failed tests:"
	printf '    %s\n' "${failed_names[@]}"
fi
echo
echo "$passed passed, $failed failed"
[[ $failed -eq 0 && $passed -gt 0 ]]
