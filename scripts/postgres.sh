#!/usr/bin/env bash
# The PostgreSQL the catalog tests run against, as production's catalog does: Debian's package,
# installed when missing, its cluster started when down, and the role and database the tests use
# created when absent. Idempotent; runs as root or with sudo. Listens on loopback only (Debian's
# default listen_addresses = 'localhost'). Prints nothing but errors when all is already there.
set -euo pipefail

ROLE=statecore
PASSWORD=statecore
DATABASE=statecore_test

sudo_=()
[ "$(id -u)" = 0 ] || sudo_=(sudo)
apt_() { "${sudo_[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "$@"; }

if ! command -v pg_lsclusters >/dev/null || [ -z "$(ls /usr/lib/postgresql 2>/dev/null)" ]; then
  apt_ install -y --no-install-recommends postgresql >/dev/null \
    || { apt_ update >/dev/null && apt_ install -y --no-install-recommends postgresql >/dev/null; }
fi

version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
if ! pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main"' | grep -q .; then
  "${sudo_[@]}" pg_createcluster "$version" main >/dev/null
fi
if ! pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" && $4 == "online"' | grep -q .; then
  "${sudo_[@]}" pg_ctlcluster "$version" main start
fi

as_postgres() { "${sudo_[@]}" runuser -u postgres -- "$@"; }
for _ in $(seq 1 30); do
  as_postgres psql -qAtc "SELECT 1" >/dev/null 2>&1 && break
  sleep 1
done
if [ "$(as_postgres psql -qAtc "SELECT 1 FROM pg_roles WHERE rolname = '$ROLE'")" != 1 ]; then
  as_postgres psql -qc "CREATE ROLE $ROLE LOGIN PASSWORD '$PASSWORD'"
fi
# the month test (tests/airflow/month.py) gives its Airflow a metadata database of its own
if [ "$(as_postgres psql -qAtc "SELECT rolcreatedb FROM pg_roles WHERE rolname = '$ROLE'")" != t ]; then
  as_postgres psql -qc "ALTER ROLE $ROLE CREATEDB"
fi
if [ "$(as_postgres psql -qAtc "SELECT 1 FROM pg_database WHERE datname = '$DATABASE'")" != 1 ]; then
  as_postgres psql -qc "CREATE DATABASE $DATABASE OWNER $ROLE"
fi
