#!/usr/bin/env bash
# Stops what up.sh DIR started (controller manager, API server, then etcd) and waits for
# each to exit. Leaves DIR (logs, certificates) for inspection; safe to run twice.
# A pid is signalled only while it still runs the component's program: one that exited
# early leaves its pid to be reused (pid_max is 32768 here, and make test starts thousands
# of processes), and a stranger's process (another test's PostgreSQL backend) must live.
set -uo pipefail
dir="${1:?usage: down.sh DIR}"
declare -A program=([controller-manager]=kube-controller-manager [apiserver]=kube-apiserver [etcd]=etcd)
for component in controller-manager apiserver etcd; do
  pidfile="$dir/$component.pid"
  [ -f "$pidfile" ] || continue
  pid="$(cat "$pidfile")"
  if { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -q "/${program[$component]} " &&
    kill -TERM "$pid" 2>/dev/null; then
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$pidfile"
done
