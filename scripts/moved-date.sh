#!/usr/bin/env bash
# moved-date.sh: runs Go tests with this process's date moved, to find tests
# that pass only on some days (make test-dates).
#
#   scripts/moved-date.sh '2027-02-28T23:59:58Z 2028-02-29T23:59:58Z' -short ./region/... ./period/...
#   scripts/moved-date.sh --overlay      # writes the overlay, prints its path
#
# Go reads the wall clock from the kernel without libc, so LD_PRELOAD
# tools such as faketime cannot move it. Instead the test binaries are
# built with an overlay of the standard library's time package whose Now
# adds a fixed offset, taken at process start from QUOTA_MOVED_DATE (unix
# seconds): every test binary starts at that instant and its clock runs on
# from there. Without QUOTA_MOVED_DATE the offset is 0 and time is the
# machine's: .ci/run builds everything with this overlay (--overlay), so
# that make test, make test-dates and the harness share one build. The
# monotonic clock, timers and sleeps are untouched. Servers the tests start
# (Redis, NATS, Postgres) keep the machine's real date, as a store whose
# clock differs from its callers' would.
#
# Each package's test binary is built and linked once and run at every
# date in turn (go test -exec this script --run), each run with its date
# on its first line; a package fails when it fails at any date.
set -euo pipefail

if [[ ${1:-} == --run ]]; then
	# go test -exec: $2 is the test binary, the rest its flags.
	shift
	failed=()
	for secs in ${QUOTA_MOVED_DATES:?}; do
		echo "moved-date: $(date -u -d "@$secs" '+%Y-%m-%dT%H:%M:%SZ %A')"
		QUOTA_MOVED_DATE=$secs "$@" || failed+=("$(date -u -d "@$secs" '+%Y-%m-%dT%H:%M:%SZ')")
	done
	if ((${#failed[@]})); then
		echo "moved-date: FAIL at ${failed[*]}"
		exit 1
	fi
	exit 0
fi

overlay_only=false
if [[ ${1:-} == --overlay ]]; then
	overlay_only=true
else
	[[ $# -ge 2 ]] || { echo "usage: $0 'RFC3339-DATE...' PACKAGE... | $0 --overlay" >&2; exit 2; }
	dates=()
	for d in $1; do
		secs=$(date -u -d "$d" +%s) || { echo "moved-date: cannot parse date $d" >&2; exit 2; }
		dates+=("$secs")
	done
	shift
fi

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
# Written to a temporary name and moved, so that concurrent runs never read half a file; the
# content is the same every time, so the overlay's build cache entries are too.
awk -v hook="$hook" '
	$0 == hook && !done { print; print "\tsec += movedBy"; done = 1; next }
	{ print }
' "$src" >"$dir/time.go.$$"
mv "$dir/time.go.$$" "$dir/time.go"
# movedBy goes into zoneinfo.go, which imports syscall already: the overlay replaces files and adds
# none, since tools that read a package's files from disk (staticcheck) cannot open an added one.
{
	cat "$goroot/src/time/zoneinfo.go"
	cat <<'GO'

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
} >"$dir/zoneinfo.go.$$"
mv "$dir/zoneinfo.go.$$" "$dir/zoneinfo.go"
cat >"$dir/overlay.json.$$" <<JSON
{"Replace": {"$src": "$dir/time.go", "$goroot/src/time/zoneinfo.go": "$dir/zoneinfo.go"}}
JSON
mv "$dir/overlay.json.$$" "$dir/overlay.json"

if $overlay_only; then
	echo "$dir/overlay.json"
	exit 0
fi

for secs in "${dates[@]}"; do
	echo "moved-date: $(date -u -d "@$secs" '+%Y-%m-%dT%H:%M:%SZ %A')"
done
echo "moved-date: for $*"
# GOFLAGS, not a flag: the daemons a test builds with go build move too. .ci/run sets the same
# overlay for the whole run; it is added only once.
flags=${GOFLAGS:-}
[[ " $flags " == *" -overlay=$dir/overlay.json "* ]] || flags="$flags -overlay=$dir/overlay.json"
self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
QUOTA_MOVED_DATES="${dates[*]}" GOFLAGS=$flags go test -count=1 -exec "$self --run" "$@"
