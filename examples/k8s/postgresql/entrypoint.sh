#!/bin/bash
# Initialise $PGDATA on first start, then run PostgreSQL in the foreground as the
# container's process (the image's STOPSIGNAL, SIGINT, is its fast shutdown).
#   POSTGRES_USER (default kgroups), POSTGRES_DB (default: the user's name),
#   POSTGRES_PASSWORD or POSTGRES_PASSWORD_FILE (required).
set -euo pipefail
user="${POSTGRES_USER:-kgroups}"
db="${POSTGRES_DB:-$user}"
if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then
  POSTGRES_PASSWORD="$(cat "$POSTGRES_PASSWORD_FILE")"
fi
if [ -z "${POSTGRES_PASSWORD:-}" ]; then
  echo "kgroups-postgresql: set POSTGRES_PASSWORD or POSTGRES_PASSWORD_FILE" >&2
  exit 2
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  mkdir -p "$PGDATA"
  chmod 700 "$PGDATA"
  pwfile="$(mktemp)"
  trap 'rm -f "$pwfile"' EXIT
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  # The superuser is the image's `postgres`, reachable only through the local socket;
  # the coordinators' user owns its database and nothing else.
  initdb --username=postgres --auth-local=peer --auth-host=scram-sha-256 \
    --encoding=UTF8 --locale=C.UTF-8 >/dev/null
  {
    echo "listen_addresses = '*'"
    echo "unix_socket_directories = '/tmp'"
  } >>"$PGDATA/postgresql.conf"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  pg_ctl --silent --wait --options="-c listen_addresses='' -c unix_socket_directories=/tmp" start
  psql --host=/tmp --username=postgres --dbname=postgres --set=ON_ERROR_STOP=1 --quiet \
    --set=user="$user" --set=db="$db" --set=password="$(cat "$pwfile")" <<'SQL'
CREATE ROLE :"user" LOGIN PASSWORD :'password';
CREATE DATABASE :"db" OWNER :"user";
SQL
  pg_ctl --silent --wait stop
  rm -f "$pwfile"
  echo "kgroups-postgresql: initialised $PGDATA (database $db, owner $user)"
fi
exec postgres
