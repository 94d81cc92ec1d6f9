#!/usr/bin/env bash
# `make e2e-kind`: the e2e scenarios on a kind cluster with real pods. Needs a working
# container engine (docker or podman) and kind; where there is none it says so and exits 0,
# because the same scenarios run against a real API server in `make test` regardless.
set -euo pipefail
engine=""
for candidate in docker podman; do
  if command -v "$candidate" >/dev/null && "$candidate" info >/dev/null 2>&1; then
    engine="$candidate"; break
  fi
done
if [ -z "$engine" ]; then
  echo "e2e-kind: SKIPPED: no running container engine (docker/podman) on this machine." >&2
  echo "e2e-kind: the same scenarios run against a local kube-apiserver in 'make test'." >&2
  exit 0
fi
echo "e2e-kind: a container engine ($engine) is present, but the kind flow (chart install," >&2
echo "e2e-kind: member pods) is not written yet; see issue 4's note." >&2
exit 1
