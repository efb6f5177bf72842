#!/usr/bin/env bash
# moved-date.sh: runs Go tests with this process's date moved, to find tests
# that pass only on some days (make test-dates).
#
#   scripts/moved-date.sh 2027-02-28T23:59:58Z ./region/... ./period/...
#
# Go reads the wall clock from the kernel without libc, so LD_PRELOAD
# tools such as faketime cannot move it. Instead the test binaries are
# built with an overlay of the standard library's time package whose Now
# adds a fixed offset, taken at process start from QUOTA_MOVED_DATE (unix
# seconds): every test binary starts at that instant and its clock runs on
# from there. The monotonic clock, timers and sleeps are untouched. Servers
# the tests start (Redis, NATS, Postgres) keep the machine's real date, as
# a store whose clock differs from its callers' would.
set -euo pipefail

[[ $# -ge 2 ]] || { echo "usage: $0 RFC3339-DATE PACKAGE..." >&2; exit 2; }
date=$1
shift
secs=$(date -u -d "$date" +%s) || { echo "moved-date: cannot parse date $date" >&2; exit 2; }

goroot=$(go env GOROOT)
src=$goroot/src/time/time.go
dir=${QUOTA_CACHE_DIR:-${TMPDIR:-/tmp}}/moved-date-$(go env GOVERSION)
mkdir -p "$dir"

# The hook: Now's first line reads the runtime's clock; add the offset there.
hook='	sec, nsec, mono := runtimeNow()'
grep -qxF "$hook" "$src" || {
	echo "moved-date: $src has no line '$hook' (a Go release changed time.Now): update this script" >&2
	exit 1
}
awk -v hook="$hook" '
	$0 == hook && !done { print; print "\tsec += movedBy"; done = 1; next }
	{ print }
' "$src" >"$dir/time.go"
cat >"$dir/moved.go" <<'GO'
package time

import "syscall"

// movedBy is the offset of scripts/moved-date.sh: QUOTA_MOVED_DATE (unix
// seconds) less the real time at process start.
var movedBy = func() int64 {
	v, ok := syscall.Getenv("QUOTA_MOVED_DATE")
	if !ok {
		return 0
	}
	var want int64
	for _, c := range v {
		if c < '0' || c > '9' {
			panic("QUOTA_MOVED_DATE: want unix seconds, got " + v)
		}
		want = want*10 + int64(c-'0')
	}
	sec, _, _ := runtimeNow()
	return want - sec
}()
GO
cat >"$dir/overlay.json" <<JSON
{"Replace": {"$src": "$dir/time.go", "$goroot/src/time/moved.go": "$dir/moved.go"}}
JSON

echo "moved-date: $(date -u -d "@$secs" '+%Y-%m-%dT%H:%M:%SZ %A') for $*"
# GOFLAGS, not a flag: the daemons a test builds with go build move too.
QUOTA_MOVED_DATE=$secs GOFLAGS="${GOFLAGS:-} -overlay=$dir/overlay.json" go test -count=1 "$@"
