#!/usr/bin/env bash
# A container runtime on a machine without systemd, from Debian's packages:
#   bash e2e/cluster/runtime.sh up      install (once) and start containerd and dockerd
#   bash e2e/cluster/runtime.sh down    stop them and put the host back as it was
#   bash e2e/cluster/runtime.sh status  say whether dockerd answers
# `up` is idempotent (a running daemon is reused) and prints the docker socket's path as
# its last stdout line; everything else goes to stderr.
#
# What had to be got round on these machines (each point is explained where the code does it):
#  * no systemd: the daemons are started by hand, their logs and pids under $state/run;
#    package scripts are kept from starting services (a policy-rc.d for the install);
#  * root may lack CAP_SYS_RESOURCE in its bounding set, and then every `--privileged`
#    container (each kind node) fails in runc ("unable to apply caps"). Only where the
#    capability is missing, a small runc wrapper drops it from the container's spec and
#    dockerd uses that wrapper as its default runtime;
#  * the runtime, kubelet and kube-proxy (from inside privileged kind nodes) change the
#    host: sysctls, iptables rules, bridges. `up` records them before the first daemon
#    starts and `down` restores them: rules from iptables-save, changed sysctls, and links
#    that did not exist before are deleted;
#  * every container is placed under a cgroup of its own (`--cgroup-parent`), made by `up`
#    and removed by `down`, with the CPU weight of four ordinary processes: otherwise a
#    kind node (its API server, etcd, kubelet and every pod) competes for CPU as one
#    process does, and beside a busy host (make test's other workers) it ran about three
#    times slower than alone.
set -euo pipefail
cache="${KGROUPS_CACHE:-$HOME/.cache/kgroups}"
state="$cache/cluster-runtime"
run="$state/run"
socket="$run/docker.sock"
PACKAGES=(docker.io containerd runc iptables debootstrap containernetworking-plugins jq)
CGROUP=kgroups-containers
WEIGHT=4  # the containers' CPU weight, in ordinary (nice 0) processes
# Host settings kubelet, kube-proxy and dockerd are known to change; restored by `down`.
SYSCTLS='^(kernel\.panic|kernel\.panic_on_oops|kernel\.keys\.|vm\.overcommit_memory|net\.netfilter\.nf_conntrack_|net\.ipv4\.ip_forward|net\.ipv4\.conf\.all\.|net\.ipv6\.conf\.all\.|net\.bridge\.|fs\.inotify\.|fs\.file-max|kernel\.pid_max)'

say() { echo "runtime: $*" >&2; }
fail() { say "$*"; exit 1; }

install_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  [ "$(id -u)" = 0 ] || fail "installing ${missing[*]} needs root"
  say "installing ${missing[*]} from Debian's packages"
  # No service may start during the install: there is no init to own it.
  local policy=/usr/sbin/policy-rc.d own_policy=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 755 "$policy"; own_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  local apt=(apt-get -q -y -o DPkg::Lock::Timeout=300)
  if ! "${apt[@]}" install --no-install-recommends "${missing[@]}" >&2; then
    "${apt[@]}" update >&2 || { [ -z "$own_policy" ] || rm -f "$policy"; fail "apt-get update failed"; }
    "${apt[@]}" install --no-install-recommends "${missing[@]}" >&2 ||
      { [ -z "$own_policy" ] || rm -f "$policy"; fail "apt-get install ${missing[*]} failed"; }
  fi
  [ -z "$own_policy" ] || rm -f "$policy"
}

lacks_sys_resource() {  # CAP_SYS_RESOURCE is bit 24 of the bounding set
  local bnd
  bnd="$(awk '/^CapBnd:/ {print $2}' /proc/self/status)"
  (( ((16#$bnd) >> 24 & 1) == 0 ))
}

write_runc_wrapper() {  # prints the wrapper's path
  local wrapper="$state/runc-without-sys-resource" real
  real="$(command -v runc)"
  cat >"$wrapper.tmp" <<EOF
#!/bin/sh
# runc, minus CAP_SYS_RESOURCE: this host's root cannot grant it (its bounding set lacks
# it), so a spec asking for it (every --privileged container) would fail. Written by
# e2e/cluster/runtime.sh.
drop() {
  [ -f "\$1" ] || return 0
  tmp="\$1.kgroups.\$\$"
  jq '(.. | objects | select(has("bounding"))) |= with_entries(
        .value |= (if type == "array" then map(select(. != "CAP_SYS_RESOURCE")) else . end))' \
    "\$1" >"\$tmp" && mv "\$tmp" "\$1"
}
bundle=""; process=""; prev=""
for arg in "\$@"; do
  case "\$prev" in --bundle|-b) bundle="\$arg" ;; --process|-p) process="\$arg" ;; esac
  case "\$arg" in --bundle=*) bundle="\${arg#--bundle=}" ;; --process=*) process="\${arg#--process=}" ;; esac
  prev="\$arg"
done
[ -z "\$bundle" ] || drop "\$bundle/config.json"
[ -z "\$process" ] || drop "\$process"
exec $real "\$@"
EOF
  chmod 755 "$wrapper.tmp"
  mv "$wrapper.tmp" "$wrapper"
  echo "$wrapper"
}

record_host() {  # once, before any daemon of ours has touched the host
  [ -f "$state/host/recorded" ] && return 0
  mkdir -p "$state/host"
  sysctl -a 2>/dev/null | grep -E "$SYSCTLS" >"$state/host/sysctl" || true
  iptables-save >"$state/host/iptables" 2>/dev/null || true
  ip6tables-save >"$state/host/ip6tables" 2>/dev/null || true
  ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | sort >"$state/host/links"
  touch "$state/host/recorded"
}

restore_rules() {  # restore_rules iptables|ip6tables SAVED: every table back as saved
  # iptables-restore replaces only the tables its input names, so a table that did not
  # exist (or was empty) before is given as empty: built-in chains ACCEPT, nothing else.
  local tool="$1" saved="$2" table input
  input="$(cat "$saved" 2>/dev/null || true)"
  for table in $("$tool-save" 2>/dev/null | sed -n 's/^\*//p'); do
    grep -qx "\*$table" <<<"$input" && continue
    input+=$'\n'"*$table"$'\n'
    input+="$("$tool-save" -t "$table" | awk '/^:/ && $2 != "-" {print $1 " ACCEPT [0:0]"}')"
    input+=$'\nCOMMIT\n'
  done
  [ -z "${input//[[:space:]]/}" ] || "$tool-restore" <<<"$input" || say "cannot restore $tool rules"
}

restore_host() {
  [ -f "$state/host/recorded" ] || return 0
  local key value now
  while IFS= read -r line; do
    key="${line%% = *}"; value="${line#* = }"
    now="$(sysctl -n "$key" 2>/dev/null)" || continue
    [ "$now" = "$value" ] || sysctl -q -w "$key=$value" >/dev/null 2>&1 || say "cannot restore $key"
  done <"$state/host/sysctl"
  restore_rules iptables "$state/host/iptables"
  restore_rules ip6tables "$state/host/ip6tables"
  local link
  while IFS= read -r link; do
    grep -qxF "$link" "$state/host/links" || ip link delete "$link" 2>/dev/null || true
  done < <(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | sort)
  rm -rf "$state/host"
}

containers_cgroup() {  # the parent cgroup of every container, weighted (v1 or v2)
  local v1=/sys/fs/cgroup/cpu v2=/sys/fs/cgroup
  if [ -f "$v1/cpu.shares" ]; then
    mkdir -p "$v1/$CGROUP" && echo $((1024 * WEIGHT)) >"$v1/$CGROUP/cpu.shares" ||
      say "cannot weight $v1/$CGROUP: containers get one process's share of the CPU"
  elif grep -qw cpu "$v2/cgroup.subtree_control" 2>/dev/null; then
    mkdir -p "$v2/$CGROUP" && echo $((100 * WEIGHT)) >"$v2/$CGROUP/cpu.weight" ||
      say "cannot weight $v2/$CGROUP: containers get one process's share of the CPU"
  fi
}

remove_containers_cgroup() {  # every hierarchy's copy, innermost first, once it is empty
  local dir
  for dir in /sys/fs/cgroup/*/"$CGROUP" /sys/fs/cgroup/"$CGROUP"; do
    [ -d "$dir" ] || continue
    find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null ||
      say "cannot remove $dir: $(find "$dir" -name cgroup.procs -exec cat {} + 2>/dev/null | wc -l) processes left"
  done
}

docker_answers() { DOCKER_HOST="unix://$socket" docker info >/dev/null 2>&1; }

wait_for() {  # wait_for SECONDS WHAT COMMAND...
  local deadline=$((SECONDS + $1)) what="$2"; shift 2
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.5
  done
}

up() {
  mkdir -p "$run"
  if docker_answers; then echo "$socket"; return 0; fi
  install_packages
  record_host
  local containerd_sock="$run/containerd.sock"
  if ! [ -S "$containerd_sock" ] || ! ctr --address "$containerd_sock" version >/dev/null 2>&1; then
    say "starting containerd"
    containerd --address "$containerd_sock" --root "$state/containerd" \
      --state "$run/containerd-state" >"$run/containerd.log" 2>&1 &
    echo $! >"$run/containerd.pid"
    wait_for 30 containerd ctr --address "$containerd_sock" version >/dev/null 2>&1 ||
      fail "containerd did not start: $(tail -5 "$run/containerd.log")"
  fi
  local runtime=()
  if lacks_sys_resource; then
    say "root lacks CAP_SYS_RESOURCE: privileged containers run through a runc wrapper"
    runtime=(--add-runtime "kgroups-runc=$(write_runc_wrapper)" --default-runtime kgroups-runc)
  fi
  containers_cgroup
  say "starting dockerd"
  dockerd --host "unix://$socket" --containerd "$containerd_sock" --cgroup-parent "/$CGROUP" \
    --data-root "$state/docker" --exec-root "$run/docker-exec" --pidfile "$run/dockerd.pid" \
    --storage-driver overlay2 "${runtime[@]}" >"$run/dockerd.log" 2>&1 &
  wait_for 60 dockerd docker_answers || fail "dockerd did not start: $(tail -5 "$run/dockerd.log")"
  collect_garbage
  echo "$socket"
}

collect_garbage() {  # this daemon is kgroups' alone: what no container or name holds is
  # left over (a kind node's volume from a cluster never deleted, an image replaced by a
  # newer build of its name), and it fills the disk run after run (tens of GB)
  local reclaimed
  reclaimed="$( (DOCKER_HOST="unix://$socket" docker volume prune -f
    DOCKER_HOST="unix://$socket" docker image prune -f) 2>&1 | awk '/reclaimed/ {print $4}' |
    paste -sd+ -)"
  say "left-over volumes and untagged images removed (${reclaimed:-0B})"
}

stop_pid() {  # stop_pid PIDFILE NAME: only while the pid still runs NAME (pids are reused)
  local pid
  pid="$(cat "$1" 2>/dev/null)" || return 0
  if { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -qw "$2" && kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    wait_for 30 "$2 to stop" bash -c "! kill -0 $pid 2>/dev/null" || kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$1"
}

down() {
  if docker_answers; then  # containers first: kind nodes hold mounts and bridges
    local ids
    ids="$(DOCKER_HOST="unix://$socket" docker ps -aq)"
    [ -z "$ids" ] || DOCKER_HOST="unix://$socket" docker rm -f $ids >/dev/null 2>&1 || true
  fi
  stop_pid "$run/dockerd.pid" dockerd
  stop_pid "$run/containerd.pid" containerd
  remove_containers_cgroup
  restore_host
  say "stopped; the host is as it was"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) if docker_answers; then echo "running: $socket"; else echo "stopped"; exit 1; fi ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
