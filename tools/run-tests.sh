#!/usr/bin/env bash
# make test's pytest phases, with everything they start stopped on Ctrl-C, SIGTERM and at
# the end (tests/reaper.py). Phase one runs every test not marked `alone` on
# $TEST_WORKERS pytest-xdist workers; phase two the `alone` tests by themselves.
#   tools/run-tests.sh [PATH...]     (default: tests)
# Environment: PYTEST (default .venv/bin/pytest), TEST_WORKERS (4), PYTEST_FLAGS (-q).
set -u
cd "$(dirname "$0")/.."
pytest=${PYTEST:-.venv/bin/pytest}
python=$(dirname "$pytest")/python
workers=${TEST_WORKERS:-4}
flags=${PYTEST_FLAGS:--q}
[ $# -gt 0 ] || set -- tests
export KGROUPS_TEST_RUN="$(date +%s%N)-$$"
export KGROUPS_REPLICA_SIM_SEEDS=${KGROUPS_REPLICA_SIM_SEEDS:-1000}

interrupted() {
  trap '' INT TERM
  echo "== interrupted: stopping everything this run started" >&2
  "$python" -m tests.reaper --interrupted "$KGROUPS_TEST_RUN"
  exit 130
}
trap interrupted INT TERM

# pytest runs in the background and is waited for, so that the trap runs at once on a
# signal. A non-interactive shell starts a background command with SIGINT and SIGQUIT
# ignored, and every process the tests start would inherit that (a Python child would
# never raise KeyboardInterrupt): they are set back to their defaults before pytest.
phase() {
  "$python" -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
signal.signal(signal.SIGQUIT, signal.SIG_DFL)
os.execv(sys.argv[1], sys.argv[1:])' "$@" &
  wait $!
}

status=0
# shellcheck disable=SC2086
phase "$pytest" $flags --durations=30 -n "$workers" --dist loadgroup -m "not alone" "$@" \
  || status=$?
[ "$status" -ne 5 ] || status=0  # a selection with no such test
# shellcheck disable=SC2086
phase "$pytest" $flags -m alone --test-times .kgroups/test-times-alone.tsv "$@" \
  || { code=$?; [ "$code" -eq 5 ] || status=$code; }
"$python" -m tests.reaper "$KGROUPS_TEST_RUN"
exit "$status"
