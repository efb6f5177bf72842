#!/usr/bin/env bash
# ci-cold.sh: runs .ci/run as CI runs it on a new machine, and prints each stage's wall time.
#
# The run is of this repository's committed HEAD, in a fresh clone, with CI=true and no standard
# input, and with every cache the run fills empty and new: the Go module cache (GOMODCACHE,
# GOPATH), the Go build cache (GOCACHE), the user cache directory (XDG_CACHE_HOME: staticcheck's
# and the Stripe test's caches live there), the project's cache (QUOTA_CACHE_DIR, ~/.cache/quota
# otherwise: the Terraform provider, the control plane of the apply test) and Terraform's plugin
# cache (TF_PLUGIN_CACHE_DIR). They are directories under one new root; the machine's own caches
# are neither read nor removed.
#
#   scripts/ci-cold.sh                     # cold: every cache empty; the root is removed after
#   scripts/ci-cold.sh --caches DIR        # caches in DIR, kept: run it twice for cold, then warm
#
# Stages are the `say "…"` lines of .ci/run; the `==> …` lines its scripts print (tf-validate's
# provider build, tf-apply-test's control-plane build) are shown as steps under their stage. The
# full log, each line stamped with its time, is kept as ci-cold.log in the root (or DIR).
# The exit status is .ci/run's.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
caches=""
case "${1:-}" in
"") ;;
--caches)
	caches=${2:?--caches needs a directory}
	;;
*)
	echo "usage: scripts/ci-cold.sh [--caches DIR]" >&2
	exit 2
	;;
esac

if [[ -n $caches ]]; then
	mkdir -p "$caches"
	root=$(cd "$caches" && pwd)
else
	root=$(mktemp -d "${TMPDIR:-/tmp}/quota-ci-cold.XXXXXX")
	# Module cache files are read-only: make them writable to remove them.
	trap 'chmod -R u+w "$root" 2>/dev/null; rm -rf "$root"' EXIT
fi
commit=$(git -C "$repo" rev-parse HEAD)
clone=$root/clone-$commit
rm -rf "$clone"
git clone --quiet --no-hardlinks "$repo" "$clone"
git -C "$clone" checkout --quiet --detach "$commit"

log=$root/ci-cold.log
markers=$root/markers
: >"$log"
: >"$markers"
# Terraform refuses a plugin cache directory that does not exist (a CLI configuration error).
mkdir -p "$root/terraform-plugin-cache"
# The stages, as .ci/run names them: the text of each `say "…"` up to its first substitution.
mapfile -t stages < <(sed -n 's/^[[:space:]]*say "\([^"$]*\).*"$/\1/p' "$clone/.ci/run")

is_stage() {
	local s
	for s in "${stages[@]}"; do
		[[ $1 == "$s"* ]] && return 0
	done
	return 1
}

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
mem_gb=$(awk '/MemTotal/ {printf "%.0f", $2 / 1048576}' /proc/meminfo)
printf 'ci-cold: .ci/run of %s, %s, on %s cores and %s GB; load %s at the start\n' \
	"${commit:0:12}" "$(date -u '+%Y-%m-%d %H:%M UTC')" "$(nproc)" "$mem_gb" "$(loadavg)"
printf 'ci-cold: caches under %s; log %s\n' "$root" "$log"

began=$EPOCHSECONDS
set +e
(
	cd "$clone" &&
		exec env CI=true \
			GOMODCACHE="$root/gopath/pkg/mod" GOPATH="$root/gopath" GOCACHE="$root/go-build" \
			XDG_CACHE_HOME="$root/cache" QUOTA_CACHE_DIR="$root/cache/quota" \
			TF_PLUGIN_CACHE_DIR="$root/terraform-plugin-cache" \
			bash .ci/run </dev/null 2>&1
) | while IFS= read -r line; do
	printf '%(%T)T %s\n' "$EPOCHSECONDS" "$line" >>"$log"
	printf '%s\n' "$line"
	if [[ $line == "==> "* ]]; then
		level=1
		is_stage "${line#==> }" && level=0
		printf '%s %s %s\n' "$EPOCHSECONDS" "$level" "${line#==> }" >>"$markers"
	fi
done
status=${PIPESTATUS[0]}
set -e
ended=$EPOCHSECONDS

echo
printf 'ci-cold: wall time per stage (m:ss); load %s at the end\n' "$(loadavg)"
awk -v began="$began" -v ended="$ended" '
	{ t[NR] = $1; lv[NR] = $2; $1 = ""; $2 = ""; sub(/^  /, ""); name[NR] = $0 }
	function mss(s) { return sprintf("%d:%02d", int(s / 60), s % 60) }
	END {
		for (i = 1; i <= NR; i++) {
			end = ended
			for (j = i + 1; j <= NR; j++) if (lv[j] <= lv[i]) { end = t[j]; break }
			printf "  %6s  %s%s\n", mss(end - t[i]), (lv[i] ? "    " : ""), substr(name[i], 1, 80)
		}
		printf "  %6s  total, .ci/run exit status %s\n", mss(ended - began), status
	}' status="$status" "$markers"
exit "$status"
