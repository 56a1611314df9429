#!/usr/bin/env bash
# Over-admission under membership churn, measured from outside on real
# binaries: the load tool's accuracy mode on a local 3-node cluster, all
# checks entering node 1, 300 keys under a limit of 30 per 20 s at 6,000
# checks/s for 32 s, for TOKEN_BUCKET, FIXED_WINDOW and SLIDING_WINDOW
# (each on a fresh cluster), in two scenarios:
#
#   graceful  a 4th node joins at 6 s, node 2 leaves (SIGTERM) at 14 s and
#             comes back at 22 s
#   crash     node 2 is killed (SIGKILL) at 10 s
#
# Each report goes to $OUT/<scenario>.txt (default OUT=churn-results) and
# stdout; the exit code is the tool's (1 when a churn event failed). Extra
# arguments go to every run, e.g. --json, --server-bin /tmp/shardlimiter,
# --local-flag=--replication-interval=0. Takes about 4 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-churn-results}
mkdir -p "$out"
run=(--local 3 --entry-one --mode accuracy --algorithm TOKEN_BUCKET,FIXED_WINDOW,SLIDING_WINDOW
  --keys 300 --limit 30 --period 20s --rate 6000 --duration 32s)
status=0
for scenario in graceful=6s:join,14s:leave=2,22s:restart=2 crash=10s:kill=2; do
  name=${scenario%%=*} spec=${scenario#*=}
  echo "== $name: --churn $spec" >&2
  go run ./loadtest "${run[@]}" --churn "$spec" "$@" | tee "$out/$name.txt" || status=$?
done
exit "$status"
