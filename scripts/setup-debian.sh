#!/usr/bin/env bash
# Sets up what `npm test` needs on a fresh Debian (12 or 13) machine, and starts the servers; safe to run
# again. .ci/run runs it before every CI run. What the suite needs:
#   - Node.js 20.19 or later with npm
#   - Redis on 127.0.0.1:6379 (redis-server and redis-cli: the cluster and fault tests start their own)
#   - PostgreSQL on 127.0.0.1:5432, user postgres without a password (trust), with a database named `test`
#   - Chromium at /usr/bin/chromium (the web page's and the docs site's browser tests)
#   - python3-h2 (an independent HTTP/2 client for the gRPC server's hostile-client tests) and
#     nghttp2-client (h2load, for bench:service)
# It changes PostgreSQL's authentication to trust for connections from this machine: meant for a
# development or CI machine, not for a server holding anything of value.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v pg_ctlcluster >/dev/null 2>&1 || missing+=(postgresql)
[ -x /usr/bin/chromium ] || missing+=(chromium)
/usr/bin/python3 -c 'import h2' >/dev/null 2>&1 || missing+=(python3-h2)
command -v h2load >/dev/null 2>&1 || missing+=(nghttp2-client)
command -v node >/dev/null 2>&1 || missing+=(nodejs npm)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y "${missing[@]}"
fi

node_version="$(node -p 'process.versions.node')"
if ! node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=19)?0:1)'; then
  echo "setup: Node.js $node_version is too old: floodgate needs 20.19 or later (Debian 13's nodejs, or nodesource)" >&2
  exit 1
fi

# Redis: a throwaway server on the default port, nothing saved to disk.
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no
fi

# PostgreSQL: the cluster Debian created, started without systemd (containers have none), trust for
# local TCP connections, and the `test` database.
version="$(ls /etc/postgresql | sort -V | tail -n 1)"
hba="/etc/postgresql/$version/main/pg_hba.conf"
if ! $SUDO grep -Eq '^host\s+all\s+all\s+127\.0\.0\.1/32\s+trust' "$hba"; then
  echo "setup: trusting connections from 127.0.0.1 and ::1 in $hba"
  $SUDO sed -i -E 's/^(host\s+all\s+all\s+(127\.0\.0\.1\/32|::1\/128)\s+)\S+/\1trust/' "$hba"
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main reload 2>/dev/null || true
fi
if ! pg_isready -h 127.0.0.1 -p 5432 -q; then
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main start
fi
for _ in $(seq 1 60); do
  if redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && pg_isready -h 127.0.0.1 -p 5432 -q; then break; fi
  sleep 0.5
done
redis-cli -h 127.0.0.1 -p 6379 ping
pg_isready -h 127.0.0.1 -p 5432
if ! psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1; then
  echo "setup: creating the database test"
  createdb -h 127.0.0.1 -U postgres test
fi
echo "setup: ready (Node.js $node_version, Redis, PostgreSQL $version with database test, Chromium, python3-h2, h2load)"
