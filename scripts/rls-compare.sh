#!/usr/bin/env bash
# rls-compare.sh: Envoy's rate limit service (gRPC ShouldRateLimit) served by
# envoyproxy/ratelimit and by the quota daemon, side by side on this machine.
#
#   scripts/rls-compare.sh /path/to/ratelimit      # a built envoyproxy/ratelimit server
#
# Fetches nothing. Build the ratelimit binary yourself, outside this repository:
#   git clone https://github.com/envoyproxy/ratelimit /tmp/envoy-ratelimit
#   (cd /tmp/envoy-ratelimit && go build -o bin/ratelimit ./src/service_cmd)
#
# Starts a fresh redis-server (no persistence) on a free port, writes one
# envoyproxy/ratelimit config (domain "bench", descriptor key "tenant" with no
# value, requests_per_unit high enough that nothing is over limit, unit second),
# and for each of RUNS rounds runs, one after another (even rounds in reverse
# order), each on a fresh process and a flushed Redis:
#   envoy-ratelimit   the given binary on that Redis (its defaults otherwise, USE_STATSD=false)
#   quota-embedded    regional-limiter --grpc-listen --rls-config, embedded defaults
#   quota-redis       the same with --redis redis://127.0.0.1:<port>/0
# each driven by `loadtest -mode grpc` (WORKERS workers, one connection each,
# KEYS distinct tenant values, DURATION). Prints one line per run (loadtest's
# decisions/s, p50, p99 and server CPU per decision from /proc/<pid>/stat; Redis
# commands per decision from INFO stats total_commands_processed; the daemon's
# quota_store_calls_total per decision) and the ratios of each quota run to the
# envoy-ratelimit run of the same round.
#
# Environment: RUNS (2), DURATION (10s; whole seconds), WORKERS (32), KEYS (10000),
# NICE (19: every process runs under `nice -n $NICE`). Needs go, redis-server,
# redis-cli and curl. Stops everything it started on exit.
set -euo pipefail

if [[ $# -ne 1 || ! -x $1 ]]; then
	echo "usage: $0 /path/to/envoyproxy-ratelimit-binary" >&2
	exit 2
fi
ENVOY_BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
RUNS=${RUNS:-2}
DURATION=${DURATION:-10s}
WORKERS=${WORKERS:-32}
KEYS=${KEYS:-10000}
NICE=${NICE:-19}
if [[ ! $DURATION =~ ^[0-9]+s$ ]]; then
	echo "$0: DURATION must be whole seconds, like 10s" >&2
	exit 2
fi
for cmd in go redis-server redis-cli curl; do
	command -v "$cmd" >/dev/null || { echo "$0: $cmd not found" >&2; exit 1; }
done

repo=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
pids=()
stop_all() {
	local p
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	pids=()
}
redis_pid=
cleanup() {
	stop_all
	if [[ -n $redis_pid ]]; then
		kill "$redis_pid" 2>/dev/null || true
		wait "$redis_pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
run() { nice -n "$NICE" "$@"; }

# free_port prints a loopback TCP port nothing listens on (nor was handed out
# by this script before).
used=" "
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 30000))
		[[ $used == *" $p "* ]] && continue
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			used+="$p "
			echo "$p"
			return
		fi
	done
}

# wait_http URL PID: until URL answers 200 (30 s at most) while PID runs.
wait_http() {
	local i
	for i in $(seq 300); do
		curl -fsS -m 1 -o /dev/null "$1" 2>/dev/null && return 0
		if ! kill -0 "$2" 2>/dev/null; then
			echo "$0: the server for $1 exited" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "$0: $1 did not answer 200 within 30 s" >&2
	return 1
}

echo "building regional-limiter and loadtest into $tmp" >&2
(cd "$repo" && run go build -o "$tmp/regional-limiter" ./cmd/regional-limiter && run go build -o "$tmp/loadtest" ./cmd/loadtest)

# The configuration both read, in envoyproxy/ratelimit's runtime layout:
# $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/config/*.yaml.
mkdir -p "$tmp/runtime/ratelimit/config"
cat >"$tmp/runtime/ratelimit/config/bench.yaml" <<'EOF'
domain: bench
descriptors:
  - key: tenant
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
EOF

redis_port=$(free_port)
nice -n "$NICE" redis-server --bind 127.0.0.1 --port "$redis_port" --save '' --appendonly no --loglevel warning \
	>"$tmp/redis.log" 2>&1 &
redis_pid=$!
for i in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p "$redis_port" ping >/dev/null
rcli() { redis-cli -p "$redis_port" "$@"; }
commands() { rcli info stats | tr -d '\r' | awk -F: '$1 == "total_commands_processed" {print $2}'; }

# start_system NAME: starts it on fresh ports; sets srv_pid, grpc_port, url.
start_system() {
	grpc_port=$(free_port)
	local http_port debug_port
	http_port=$(free_port)
	case $1 in
	envoy-ratelimit)
		debug_port=$(free_port)
		env USE_STATSD=false LOG_LEVEL=warn \
			RUNTIME_ROOT="$tmp/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
			REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$redis_port" \
			HOST=127.0.0.1 PORT="$http_port" GRPC_HOST=127.0.0.1 GRPC_PORT="$grpc_port" \
			DEBUG_HOST=127.0.0.1 DEBUG_PORT="$debug_port" \
			nice -n "$NICE" "$ENVOY_BIN" >"$tmp/$1.log" 2>&1 &
		srv_pid=$!
		pids=("$srv_pid")
		wait_http "http://127.0.0.1:$http_port/healthcheck" "$srv_pid" || { tail -20 "$tmp/$1.log" >&2; return 1; }
		# loadtest waits for <url>/readyz: the debug listener's catch-all
		# answers 200 (and has no quota_store_calls_total: "-").
		url="http://127.0.0.1:$debug_port"
		;;
	quota-embedded | quota-redis)
		local args=()
		[[ $1 == quota-redis ]] && args=(--redis "redis://127.0.0.1:$redis_port/0")
		mkdir -p "$tmp/data-$1"
		rm -rf "${tmp:?}/data-$1/"*
		QUOTA_ADMIN_TOKEN=rls-compare nice -n "$NICE" "$tmp/regional-limiter" \
			--listen "127.0.0.1:$http_port" --grpc-listen "127.0.0.1:$grpc_port" \
			--rls-config "$tmp/runtime/ratelimit/config" --data-dir "$tmp/data-$1" \
			--log-level warn --shutdown-delay 0 "${args[@]}" >"$tmp/$1.log" 2>&1 &
		srv_pid=$!
		pids=("$srv_pid")
		url="http://127.0.0.1:$http_port"
		wait_http "$url/readyz" "$srv_pid" || { tail -20 "$tmp/$1.log" >&2; return 1; }
		;;
	esac
}

systems=(envoy-ratelimit quota-embedded quota-redis)
results=$tmp/results
: >"$results"
echo "date $(date -u +%FT%TZ), $(nproc) cores, $WORKERS workers, $KEYS keys, $DURATION per run, $RUNS rounds; envoyproxy/ratelimit: $ENVOY_BIN"
for round in $(seq "$RUNS"); do
	order=("${systems[@]}")
	# even rounds run the systems in reverse order, so that a drift in the
	# machine's load does not favour one of them
	((round % 2 == 0)) && order=(quota-redis quota-embedded envoy-ratelimit)
	for sys in "${order[@]}"; do
		rcli flushall >/dev/null
		start_system "$sys"
		c0=$(commands)
		if ! out=$(run "$tmp/loadtest" -mode grpc -url "$url" -grpc-addr "127.0.0.1:$grpc_port" \
			-domain bench -descriptor-key tenant -keys "$KEYS" -concurrency "$WORKERS" \
			-duration "$DURATION" -server-pid "$srv_pid" 2>&1); then
			echo "$out" >&2
			echo "$0: loadtest failed against $sys" >&2
			exit 1
		fi
		c1=$(commands)
		stop_all
		line=$(awk '$1 == "grpc" {print}' <<<"$out")
		if [[ -z $line ]]; then
			echo "$out" >&2
			echo "$0: no grpc line from loadtest for $sys" >&2
			exit 1
		fi
		if grep -q 'first error' <<<"$out"; then echo "$out" >&2; fi
		# grpc <dec/s> <req/s> <p50> <p99> <max> <allowed%> <errors> <cpu> <store-calls>
		read -r _ dps _ p50 p99 _ allowed errors cpu calls <<<"$line"
		secs=$(awk -v d="$DURATION" 'BEGIN { sub(/s$/, "", d); print d }')
		# Redis commands per decision: growth of total_commands_processed
		# (less the INFO that read it) over decisions (decisions/s × duration).
		rpd=$(awk -v a="$c0" -v b="$c1" -v r="$dps" -v s="$secs" 'BEGIN { printf "%.4f", (b - a - 1) / (r * s) }')
		echo "$round $sys $dps $p50 $p99 ${cpu%µs/dec} $rpd $allowed $errors $calls" >>"$results"
	done
done

printf '\n%-5s %-16s %12s %10s %10s %16s %14s %8s %7s %16s\n' round system decisions/s p50 p99 "server CPU/dec" "Redis cmd/dec" allowed errors "store calls/dec"
awk '{ printf "%-5s %-16s %12s %10s %10s %16s %14s %8s %7s %16s\n", $1, $2, $3, $4, $5, $6 " µs", $7, $8, $9, $10 }' "$results"

printf '\nratios against envoy-ratelimit in the same round (throughput ×, CPU per decision ÷):\n'
awk '
	NR == FNR { if ($2 == "envoy-ratelimit") { e[$1] = $3; ec[$1] = $6 }; next }
	$2 == "envoy-ratelimit" { next }
	{
		cpu = ($6 > 0 && ec[$1] > 0) ? sprintf("%5.2f×", ec[$1] / $6) : "  n/a"
		printf "round %s %-16s %5.2f× the decisions/s, %s less CPU per decision\n", $1, $2, $3 / e[$1], cpu
	}
' "$results" "$results"
