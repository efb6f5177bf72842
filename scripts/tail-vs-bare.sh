#!/usr/bin/env bash
# tail-vs-bare.sh: the daemon's single-check tail latency and allocation
# beside the bare net/http handler's (issue 18), in alternating rounds.
#
#   scripts/tail-vs-bare.sh                        # the daemon built from this tree
#   scripts/tail-vs-bare.sh /path/to/old-regional-limiter   # also an older build, as "old"
#
# Each of RUNS rounds starts, one after another, each server afresh on a
# free loopback port: the given older daemon (when one is given), the
# daemon of this tree (embedded defaults, temporary data directory), and
# `loadtest -serve-bare`; and loads each with `loadtest -mode single -rate
# RATE -duration DURATION -keys KEYS -server-pid …`. Prints loadtest's line
# per server (p50, p99, p99.9, server CPU and allocation per decision) and,
# per round, the daemon's p99, p99.9 and bytes per check over the bare
# handler's.
#
# Environment: RUNS (4), RATE (5000), DURATION (20s), KEYS (10000),
# LIMITER_ARGS (more flags for the daemons of this tree and the older one,
# e.g. "--otlp-endpoint http://127.0.0.1:4318"). Needs go. Stops everything
# it started on exit.
set -euo pipefail

RUNS=${RUNS:-4} RATE=${RATE:-5000} DURATION=${DURATION:-20s} KEYS=${KEYS:-10000} LIMITER_ARGS=${LIMITER_ARGS:-}
OLD=${1:-}
cd "$(dirname "$0")/.."
work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

go build -o "$work/regional-limiter" ./cmd/regional-limiter
go build -o "$work/loadtest" ./cmd/loadtest
port=18600

# run LABEL BINARY|bare: one server, one loadtest phase; prints loadtest's line.
run() {
	local label=$1 bin=$2 args
	port=$((port + 1))
	if [ "$bin" = bare ]; then
		"$work/loadtest" -serve-bare "127.0.0.1:$port" 2>/dev/null &
		pid=$!
		args=
	else
		mkdir -p "$work/data-$port"
		# shellcheck disable=SC2086 # LIMITER_ARGS is words
		QUOTA_ADMIN_TOKEN=loadtest "$bin" --listen "127.0.0.1:$port" --data-dir "$work/data-$port" --log-level warn $LIMITER_ARGS >/dev/null 2>&1 &
		pid=$!
		args="-admin-token loadtest"
	fi
	# shellcheck disable=SC2086 # args is words
	line=$("$work/loadtest" -url "http://127.0.0.1:$port" $args -mode single -rate "$RATE" -duration "$DURATION" \
		-keys "$KEYS" -server-pid "$pid" | grep '^single')
	kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
	printf '%-6s %s\n' "$label" "$line"
}

# millis VALUE: loadtest's duration (µs, ms or s) in milliseconds.
millis() {
	case $1 in
	*µs) awk -v v="${1%µs}" 'BEGIN { print v / 1000 }' ;;
	*ms) echo "${1%ms}" ;;
	*s) awk -v v="${1%s}" 'BEGIN { print v * 1000 }' ;;
	esac
}

for r in $(seq 1 "$RUNS"); do
	echo "round $r"
	[ -n "$OLD" ] && run old "$OLD"
	new=$(run new "$work/regional-limiter"); echo "$new"
	bare=$(run bare bare); echo "$bare"
	# loadtest's columns after the label: phase decisions/s requests/s p50
	# p99 p99.9 allowed errors server-cpu store-calls server-alloc …
	set -- $new; np99=$(millis "$6"); np999=$(millis "$7"); nalloc=${12%B/dec}
	set -- $bare; bp99=$(millis "$6"); bp999=$(millis "$7"); balloc=${12%B/dec}
	awk -v a="$np99" -v b="$bp99" -v c="$np999" -v d="$bp999" -v e="$nalloc" -v f="$balloc" \
		'BEGIN { printf "  new / bare: p99 %.2fx, p99.9 %.2fx, bytes per check %.2fx\n", a / b, c / d, e / f }'
done
