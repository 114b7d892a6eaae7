#!/bin/sh
# The tiny-cost attack through `floodgate serve` on PostgreSQL with --failure open: 20 rounds of 5 calls of
# cost 5e-324 on one key, then one call on another key under 3 per hour (GCRA and a leaky bucket).
# Prints the HTTP statuses the attacker got, the victim's codes, and the breaker and store errors after.
#
#   scripts/hostile-cost-service.sh [path to the service's cli.js] [free port]
#
# Needs PostgreSQL on 127.0.0.1:5432 (database test, user postgres); works in a schema of its own.
CLI=${1:-packages/service/dist/cli.js}
PORT=${2:-18930}
SCHEMA=hostile_cost_$PORT
CONFIG=$(mktemp)
cat > "$CONFIG" <<'YAML'
prefix: hostile-cost
domains:
  - domain: api
    descriptors:
      - key: user
        policies:
          - { algorithm: gcra, name: per-user, limit: 3, periodMs: 3600000 }
          - { algorithm: leaky-bucket, name: per-user-leak, capacity: 3, leakPerSecond: 0.0001 }
YAML
node "$CLI" serve -c "$CONFIG" -s "postgres://postgres@127.0.0.1:5432/test?schema=$SCHEMA&unlogged=true" \
  -p "$PORT" --no-grpc --failure open --log-level silent --no-watch &
PID=$!
for _ in $(seq 1 60); do curl -s -o /dev/null "http://127.0.0.1:$PORT/healthz" && break; sleep 0.5; done
A='{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"attacker"}]}],"cost":5e-324}'
V='{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"victim"}]}]}'
for _ in $(seq 1 20); do
  for _ in 1 2 3 4 5; do
    curl -s -o /dev/null -w 'attacker HTTP %{http_code}\n' -H 'content-type: application/json' -d "$A" \
      "http://127.0.0.1:$PORT/v1/decide"
  done
  curl -s -H 'content-type: application/json' -d "$V" "http://127.0.0.1:$PORT/v1/decide" |
    grep -o '"code":"[A-Z_]*"' | head -1 | sed 's/^/victim /'
done | sort | uniq -c
curl -s "http://127.0.0.1:$PORT/v1/stats" | grep -o '"breaker":"[a-z-]*","storeErrorsPerSecond":[0-9.]*,"storeErrorsTotal":[0-9]*'
kill "$PID"
wait "$PID" 2>/dev/null
rm -f "$CONFIG"
psql -q -o /dev/null -h 127.0.0.1 -U postgres test -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" 2>/dev/null
