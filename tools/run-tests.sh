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

status=0
# In the background and waited for, so that the trap runs at once on a signal.
# shellcheck disable=SC2086
"$pytest" $flags --durations=30 -n "$workers" --dist loadgroup -m "not alone" "$@" &
wait $! || status=$?
[ "$status" -ne 5 ] || status=0  # a selection with no such test
# shellcheck disable=SC2086
"$pytest" $flags -m alone --test-times .kgroups/test-times-alone.tsv "$@" &
wait $! || { code=$?; [ "$code" -eq 5 ] || status=$code; }
"$python" -m tests.reaper "$KGROUPS_TEST_RUN"
exit "$status"
