#!/usr/bin/env bash
# Builds the Go peers (franz-go and sarama members and admin CLIs) into a cache outside
# the repository:
#   ${KGROUPS_CACHE:-~/.cache/kgroups}/go-peers-<digest>/{franz-go-member,sarama-member,
#                                                        franz-go-admin,sarama-admin}
# where <digest> covers go.mod, go.sum and every .go source, so an edit builds afresh and
# an unchanged tree costs one hash. Modules come from the Go module proxy of the machine's
# own Go configuration into the default module and build caches (also outside the repo).
# A stamp marks a complete build, and a lock keeps concurrent runs (parallel tests) from
# racing. Quiet on success except for the directory, the last line on stdout; the Go
# tool's output goes to stderr.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="${KGROUPS_CACHE:-$HOME/.cache/kgroups}"

command -v go >/dev/null || { echo "build.sh: 'go' is required (Go 1.26 or newer)" >&2; exit 2; }

cd "$here"
mapfile -t sources < <(find . -name '*.go' -type f | LC_ALL=C sort)
digest="$(for f in go.mod go.sum "${sources[@]}"; do printf '%s\0' "$f"; cat "$f"; done \
  | sha256sum | cut -c1-16)"
out="$root/go-peers-$digest"
if [ -f "$out/.complete" ]; then
  echo "$out"
  exit 0
fi

mkdir -p "$root"
exec 9>"$root/.lock-go-peers"
flock 9
if [ ! -f "$out/.complete" ]; then  # another run may have built it while we waited
  tmp="$(mktemp -d "$root/.go-peers-$digest.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  go build -trimpath -mod=readonly -o "$tmp/" ./cmd/... >&2
  for program in franz-go-member sarama-member franz-go-admin sarama-admin; do
    [ -x "$tmp/$program" ] || { echo "build.sh: $program was not built" >&2; exit 1; }
  done
  chmod 755 "$tmp"  # mktemp made it private
  touch "$tmp/.complete"
  rm -rf "$out"
  mv "$tmp" "$out"
fi
echo "$out"
