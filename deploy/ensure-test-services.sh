#!/usr/bin/env bash
# What the test suite needs from the machine: bubblewrap, Chromium, PostgreSQL and Redis.
# Installs missing packages through apt when run as root; starts Postgres/Redis if down.
set -euo pipefail

apt_install() {
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "error: $* missing; install it (apt-get install $*) and re-run" >&2
    exit 1
  fi
  echo "installing $* ..."
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

command -v bwrap >/dev/null || apt_install bubblewrap
command -v chromium >/dev/null || apt_install chromium
command -v redis-server >/dev/null || apt_install redis-server
command -v pg_ctlcluster >/dev/null || apt_install postgresql

if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  echo "starting PostgreSQL ..."
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
fi
for _ in $(seq 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.5; done
pg_isready -h 127.0.0.1 -p 5432

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "starting Redis ..."
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null
fi
for _ in $(seq 30); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.5; done
redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null
