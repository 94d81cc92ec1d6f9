#!/usr/bin/env bash
# Stops what up.sh DIR started (controller manager, API server, then etcd) and waits for
# each to exit. Leaves DIR (logs, certificates) for inspection; safe to run twice.
set -uo pipefail
dir="${1:?usage: down.sh DIR}"
for component in controller-manager apiserver etcd; do
  pidfile="$dir/$component.pid"
  [ -f "$pidfile" ] || continue
  pid="$(cat "$pidfile")"
  if kill -TERM "$pid" 2>/dev/null; then
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$pidfile"
done
