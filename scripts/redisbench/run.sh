#!/usr/bin/env bash
# Measures docs/REDIS.md's figures in one sitting: CL.THROTTLE on one
# shardlimiter node (redis-benchmark, 50 connections, pipeline 1 and 16),
# the same through Debian's redis-server running scripts/redisbench/gcra.lua
# by EVALSHA, and the node's gRPC at batch 1 (loadtest), alternated for
# ROUNDS rounds. Needs redis-tools and redis-server. Server CPU per check
# is read from /proc/PID/stat (user + system ticks) around each run.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-2}
N1=${N1:-200000}      # requests at pipeline 1
N16=${N16:-1000000}   # requests at pipeline 16
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
go build -o "$tmp/shardlimiter" ./cmd/shardlimiter
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

"$tmp/shardlimiter" --http-addr 127.0.0.1:0 --grpc-addr 127.0.0.1:0 --peer-addr 127.0.0.1:0 \
	--gossip-addr 127.0.0.1:0 --resp-addr 127.0.0.1:0 --log-level warn >"$tmp/node.out" 2>"$tmp/node.err" &
node=$!
until grep -q serving "$tmp/node.out"; do sleep 0.1; done
respport=$(grep -o 'resp=[^ ]*' "$tmp/node.out" | cut -d: -f2)
rport=$(freeport)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >"$tmp/redis.log" &
rpid=$!
until redis-cli -p "$rport" ping >/dev/null 2>&1; do sleep 0.1; done
sha=$(redis-cli -p "$rport" SCRIPT LOAD "$(cat scripts/redisbench/gcra.lua)")

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
bench() { # name pid port pipeline n command…
	local name=$1 pid=$2 port=$3 p=$4 n=$5; shift 5
	local t0; t0=$(ticks "$pid")
	local out; out=$(redis-benchmark -p "$port" -c 50 -P "$p" -n "$n" -r 100000 "$@" 2>&1 | tr '\r' '\n')
	local t1; t1=$(ticks "$pid")
	local rps; rps=$(echo "$out" | grep -o 'throughput summary: [0-9.]*' | tail -1 | awk '{print $3}')
	local lat; lat=$(echo "$out" | grep -A2 'latency summary' | tail -1)
	local cpu; cpu=$(awk -v t=$((t1 - t0)) -v hz="$hz" -v n="$n" 'BEGIN{printf "%.2f", t / hz / n * 1e6}')
	echo "$name pipeline=$p calls/s=$rps cpu_us_per_check=$cpu latency_ms(avg min p50 p95 p99 max)=$lat"
}
for round in $(seq "$ROUNDS"); do
	echo "== round $round $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
	for p in 1 16; do
		n=$N1; [ "$p" = 16 ] && n=$N16
		bench "shardlimiter CL.THROTTLE" "$node" "$respport" "$p" "$n" CL.THROTTLE 'k:__rand_int__' 100 1000 1
		bench "redis-server EVALSHA gcra.lua" "$rpid" "$rport" "$p" "$n" EVALSHA "$sha" 1 'k:__rand_int__' 100 1000 1 1
	done
	echo "gRPC batch 1 (loadtest --local 1 --batch 1 --concurrency 50 --duration 8s):"
	go run ./loadtest --local 1 --batch 1 --concurrency 50 --duration 8s 2>&1 | grep -vE '^ *[0-9.]+s '
done
