#!/usr/bin/env bash
# validate.sh: offline validation of the Terraform in deploy/terraform (make tf-validate).
#
# No Terraform registry is reachable here, so the kubernetes provider is built from source
# (github.com/hashicorp/terraform-provider-kubernetes, through the Go module proxy) in a throwaway
# module outside the repo, cached under $QUOTA_CACHE_DIR (default ~/.cache/quota), and handed to
# `terraform init -plugin-dir` as version $PROVIDER_VERSION. The provider's module path has no
# /v2 or /v3 suffix, so the proxy serves its 2.x and 3.x releases only as pseudo-versions of v1:
# PROVIDER_MODULE_VERSION is commit 3a33fb6 on main, which is the v3.2.1 release plus a grpc
# dependency bump and a CODEOWNERS change (no provider code change), hence the label 3.2.1. The repo's go.mod is never touched, and nothing is written inside
# the repo: every Terraform working directory is a temporary copy of deploy/terraform.
#
# Steps (all run; the script exits non-zero and lists every step that failed):
#   1. terraform fmt -check -recursive deploy/
#   2. per module (root, modules/region, modules/ledger, modules/monitoring, examples/single-cluster):
#      terraform init -backend=false -plugin-dir=<mirror>, terraform validate
#   3. terraform test (mock_provider) in the root module
#   4. the NATS config template, rendered by terraform with every variable the region module passes
#      (without and with TLS), parsed by `nats-server -t` with the password variables set as the
#      NATS Secret sets them (when nats-server is installed)
#   5. go test ./deploy/terraform/ (HCL reference check, covers examples/eks which needs the AWS
#      provider and therefore cannot be validated by terraform here)
#
# With --prepare it only builds the provider into the cache (if missing) and exits: .ci/run starts
# that at low priority beside the tests, so a new machine's build uses their idle time.
#
# Environment: TERRAFORM (default /usr/local/bin/terraform), QUOTA_CACHE_DIR, GOPROXY as usual.
set -euo pipefail

prepare=false
case "${1:-}" in
"") ;;
--prepare) prepare=true ;;
*)
	echo "usage: validate.sh [--prepare]" >&2
	exit 2
	;;
esac

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

TERRAFORM=${TERRAFORM:-/usr/local/bin/terraform}
PROVIDER_MODULE=github.com/hashicorp/terraform-provider-kubernetes
PROVIDER_VERSION=3.2.1
PROVIDER_MODULE_VERSION=v1.13.4-0.20260821094251-3a33fb6cc605
cache_dir=${QUOTA_CACHE_DIR:-${HOME:?set HOME or QUOTA_CACHE_DIR}/.cache/quota}
mirror=$cache_dir/terraform-plugins

failures=()
step() { printf '\n==> %s\n' "$*"; }
fatal() {
	printf 'tf-validate: FAIL: %s\n' "$*" >&2
	exit 1
}
# run NAME CMD...: runs CMD, records NAME as failed when it exits non-zero.
run() {
	local name=$1
	shift
	if ! "$@"; then
		printf 'tf-validate: step failed: %s\n' "$name" >&2
		failures+=("$name")
	fi
}

[[ -x $TERRAFORM ]] || fatal "$TERRAFORM not found or not executable.
  Install Terraform >= 1.9 there (no HashiCorp download is reachable from this sandbox),
  or point TERRAFORM at a binary."
command -v go >/dev/null || fatal "go not found in PATH (needed to build the kubernetes provider)"

goos=$(go env GOOS)
goarch=$(go env GOARCH)
plugin_dir=$mirror/registry.terraform.io/hashicorp/kubernetes/$PROVIDER_VERSION/${goos}_${goarch}
plugin=$plugin_dir/terraform-provider-kubernetes_v$PROVIDER_VERSION

# build_provider builds the provider from a copy of its module source, as the main module so
# that its own replace directives apply.
build_provider() {
	local tmp rc=0
	tmp=$(mktemp -d)
	build_provider_in "$tmp" || rc=$?
	chmod -R u+w "$tmp" 2>/dev/null
	rm -rf "$tmp"
	return "$rc"
}

build_provider_in() {
	local tmp=$1 src
	src=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "$PROVIDER_MODULE@$PROVIDER_MODULE_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[[ -n $src && -d $src ]] || {
		echo "could not download $PROVIDER_MODULE@$PROVIDER_MODULE_VERSION" >&2
		return 1
	}
	cp -R "$src" "$tmp/src"
	chmod -R u+w "$tmp/src"
	rm -rf "$tmp/src/vendor"
	(
		cd "$tmp/src" &&
			GOFLAGS='-mod=mod -buildvcs=false' CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/provider" .
	) || return 1
	mkdir -p "$plugin_dir"
	mv "$tmp/provider" "$plugin.tmp.$$"
	mv "$plugin.tmp.$$" "$plugin"
}

step "kubernetes provider v$PROVIDER_VERSION"
if [[ -x $plugin ]]; then
	echo "cached: $plugin"
else
	echo "building into $plugin (several minutes on first run)"
	start=$SECONDS
	build_provider || fatal "building $PROVIDER_MODULE $PROVIDER_MODULE_VERSION failed (see go output above)"
	echo "built in $((SECONDS - start))s"
fi
$prepare && exit 0

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -R "$here" "$work/terraform"
# modules/monitoring reads the alert rules and dashboards from deploy/ (path.module/../../..).
mkdir -p "$work/prometheus" "$work/grafana"
cp "$repo/deploy/prometheus/quota-rules.yaml" "$work/prometheus/"
cp "$repo"/deploy/grafana/*.json "$work/grafana/"
rm -rf "$work/terraform/.terraform" "$work/terraform/.terraform.lock.hcl"
find "$work/terraform" -name .terraform -type d -prune -exec rm -rf {} +
find "$work/terraform" -name .terraform.lock.hcl -delete
export TF_IN_AUTOMATION=1 TF_INPUT=0 CHECKPOINT_DISABLE=1
export TF_CLI_CONFIG_FILE=$work/terraformrc # empty: no credentials, no provider_installation
: >"$TF_CLI_CONFIG_FILE"

step "terraform fmt -check -recursive deploy/"
run "fmt" "$TERRAFORM" fmt -check -recursive -diff "$repo/deploy"

for mod in . modules/region modules/ledger modules/monitoring examples/single-cluster; do
	dir=$work/terraform/$mod
	step "terraform init + validate: deploy/terraform/$mod"
	if run "init $mod" "$TERRAFORM" -chdir="$dir" init -backend=false -input=false \
		-plugin-dir="$mirror" -no-color >"$work/init.log" 2>&1; then
		run "validate $mod" "$TERRAFORM" -chdir="$dir" validate -no-color
	else
		cat "$work/init.log" >&2
	fi
done

# terraform test starts the provider for every mock provider of every run, about 17 times a run,
# only to read its schema; the kubernetes provider's start is a third of the step's CPU. One
# provider process started in debug mode serves them all instead (TF_REATTACH_PROVIDERS): the
# same binary and schema, started once. Its logging is off; it is stopped on exit.
shared_provider() {
	local line
	exec {provider_out}< <(TF_LOG_PROVIDER=off TF_LOG_SDK=off TF_LOG_SDK_PROTO=off TF_LOG_SDK_MUX=off \
		TF_LOG_SDK_HELPER_SCHEMA=off TF_LOG_SDK_FRAMEWORK=off exec "$plugin" -debug 2>/dev/null)
	provider_pid=$!
	while IFS= read -r -u "$provider_out" line; do
		if [[ $line == "export TF_REATTACH_PROVIDERS="* ]]; then
			line=${line#export TF_REATTACH_PROVIDERS=\'}
			reattach=${line%\'}
			cat <&"$provider_out" >/dev/null &
			return 0
		fi
	done
	return 1
}

step "terraform test (mock_provider): deploy/terraform"
provider_pid=""
reattach=""
trap 'rm -rf "$work"; [[ -z $provider_pid ]] || kill "$provider_pid" 2>/dev/null' EXIT
if shared_provider; then
	echo "one provider process for every run (pid $provider_pid)"
else
	echo "the provider did not start in debug mode: each run starts its own"
fi
test_env=()
[[ -z $reattach ]] || test_env=(TF_REATTACH_PROVIDERS="$reattach")
run "test ." env "${test_env[@]}" "$TERRAFORM" -chdir="$work/terraform" test -no-color

# nats_password_envs: the variables the region module gives region eu's NATS pods
# (modules/region/nats.tf; tests/regions.tftest.hcl asserts the same rule) for regions ap, eu, us
# with eu's three limiter processes: one user per eu process, one per other region.
nats_password_envs=(
	QUOTA_NATS_PASSWORD_LIMITER_AP QUOTA_NATS_PASSWORD_LIMITER_US
	QUOTA_NATS_PASSWORD_LIMITER_EU_LIMITER_EU_0 QUOTA_NATS_PASSWORD_LIMITER_EU_LIMITER_EU_1
	QUOTA_NATS_PASSWORD_LIMITER_EU_LIMITER_EU_2
	QUOTA_NATS_PASSWORD_CONTROL_PLANE QUOTA_NATS_PASSWORD_RECONCILER QUOTA_NATS_PASSWORD_GATEWAY
)

# check_nats_conf renders modules/region/nats.conf.tftpl with every variable the region module
# passes, for region eu of three (control and ledger region eu), without and with TLS, and has
# nats-server parse it with the password variables set as the NATS Secret sets them (each value
# double-quoted; the passwords here carry characters nats-server would misread unquoted). It also
# checks that the template references exactly the variables the module sets, that each of eu's
# limiter processes is a user of its own that may publish on its own subjects only (and eu has no
# user for all its limiters), and that nats-server refuses the config when one of them is unset.
check_nats_conf() {
	local dir=$work/natsconf rc=0
	mkdir -p "$dir/tls"
	cat >"$dir/main.tf" <<EOF
locals {
  vars = {
    name           = "eu"
    regions        = ["ap", "eu", "us"]
    pid_file       = "$dir/nats.pid"
    lame_duck_duration     = "30s"
    lame_duck_grace_period = "10s"
    control_region = "eu"
    listen_host    = "0.0.0.0"
    client_port    = 4222
    http_port      = 8222
    cluster_port   = 6222
    gateway_port   = 7222
    store_dir      = "$dir/jetstream"
    max_file_store = "8G"
    routes         = [for i in range(3) : "nats://nats-eu-\${i}.nats-eu-headless.quota.svc.cluster.local:6222"]
    advertise      = "gw.eu.example.com:7222"
    gateways = [
      { name = "ap", urls = ["nats://gw.ap.example.com:7222"] },
      { name = "us", urls = ["nats://gw.us.example.com:7222"] },
    ]
    tls            = null
    usage_subject  = "quota.usage"
    gossip_subject = "quota.gossip"
    usage_stream   = "QUOTA_USAGE"
    catalog_bucket = "quota-catalog"
    quota_base_subject = "quota.base"
    quota_base_queue   = "quota-base"
    processes          = { ap = [], eu = ["limiter-eu-0", "limiter-eu-1", "limiter-eu-2"], us = [] }
  }
  tls = { cert_file = "$dir/tls/tls.crt", key_file = "$dir/tls/tls.key", ca_file = "$dir/tls/ca.crt" }
}
output "conf" {
  value = templatefile("$work/terraform/modules/region/nats.conf.tftpl", local.vars)
}
output "conf_tls" {
  value = templatefile("$work/terraform/modules/region/nats.conf.tftpl", merge(local.vars, { tls = local.tls }))
}
EOF
	if ! { "$TERRAFORM" -chdir="$dir" init -backend=false -input=false -no-color >/dev/null &&
		"$TERRAFORM" -chdir="$dir" apply -auto-approve -input=false -no-color >/dev/null &&
		"$TERRAFORM" -chdir="$dir" output -raw conf >"$dir/nats.conf" &&
		"$TERRAFORM" -chdir="$dir" output -raw conf_tls >"$dir/nats-tls.conf"; }; then
		echo "rendering nats.conf.tftpl failed" >&2
		return 1
	fi

	local referenced expected
	referenced=$(grep -v '^[[:space:]]*#' "$dir/nats.conf" | grep -o '\$QUOTA_NATS_PASSWORD_[A-Z0-9_]\+' | tr -d '$' | sort -u)
	expected=$(printf '%s\n' "${nats_password_envs[@]}" | sort -u)
	if [[ $referenced != "$expected" ]]; then
		echo "the template's password variables (>) differ from those modules/region/nats.tf sets (<):" >&2
		diff <(echo "$expected") <(echo "$referenced") >&2
		rc=1
	fi

	# Per-process users: each process's user publishes usage and gossip on its own subjects and
	# reads its own inbox only; no user publishes as all of eu's processes.
	local p conf
	conf=$(grep -v '^[[:space:]]*#' "$dir/nats.conf")
	for p in limiter-eu-0 limiter-eu-1 limiter-eu-2; do
		local block
		block=$(awk -v u="user: \"limiter-eu.$p\"" 'index($0, u) {on = 1} on {print} on && /^    },$/ {exit}' <<<"$conf")
		if [[ -z $block ]] || ! grep -qF "\"quota.usage.eu.$p\"" <<<"$block" ||
			! grep -qF "\"quota.gossip.eu.$p\"" <<<"$block" || ! grep -qF "\"_INBOX.limiter-eu.$p.>\"" <<<"$block" ||
			[[ $(grep -c '"quota\.\(usage\|gossip\)\.eu\.' <<<"$block") != 2 ]] || grep -qF '"_INBOX.limiter-eu.>"' <<<"$block"; then
			echo "nats.conf: user limiter-eu.$p must publish on quota.usage.eu.$p and quota.gossip.eu.$p only, and read _INBOX.limiter-eu.$p.> only:" >&2
			echo "$block" >&2
			rc=1
		fi
	done
	if grep -qF 'user: "limiter-eu"' <<<"$conf" || grep -qF '"quota.usage.eu.>"' <<<"$(sed '/user: "control-plane"/,$d' <<<"$conf")"; then
		echo "nats.conf: eu lists its processes, yet a limiter user may publish as all of them" >&2
		rc=1
	fi

	# As the NATS Secret holds them: double-quoted; ';', '#', '9e1' would break an unquoted value.
	local -a env=(POD_NAME=nats-eu-0)
	local v i=0
	for v in "${nats_password_envs[@]}"; do
		env+=("$v=\"9e1$i;pw#{x}'y\$z-0123456789abcdef\"")
		i=$((i + 1))
	done
	env "${env[@]}" nats-server -t -c "$dir/nats.conf" || {
		echo "rendered config:" >&2
		cat "$dir/nats.conf" >&2
		rc=1
	}
	# Every variable is needed: with the last one unset, nats-server must refuse the file.
	if env "${env[@]:0:${#env[@]}-1}" nats-server -t -c "$dir/nats.conf" >/dev/null 2>&1; then
		echo "nats-server accepted the config with ${nats_password_envs[-1]} unset" >&2
		rc=1
	fi

	# TLS, with a throwaway CA and server certificate (nats-server -t loads the files).
	if ! command -v openssl >/dev/null; then
		echo "TLS variant skipped: openssl not in PATH"
	elif openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=quota-test-ca \
		-keyout "$dir/tls/ca.key" -out "$dir/tls/ca.crt" >/dev/null 2>&1 &&
		openssl req -newkey rsa:2048 -nodes -subj /CN=nats-eu -keyout "$dir/tls/tls.key" \
			-out "$dir/tls/tls.csr" >/dev/null 2>&1 &&
		openssl x509 -req -in "$dir/tls/tls.csr" -CA "$dir/tls/ca.crt" -CAkey "$dir/tls/ca.key" \
			-CAcreateserial -days 1 -out "$dir/tls/tls.crt" >/dev/null 2>&1; then
		env "${env[@]}" nats-server -t -c "$dir/nats-tls.conf" || {
			echo "rendered config (TLS):" >&2
			cat "$dir/nats-tls.conf" >&2
			rc=1
		}
	else
		echo "could not make a test certificate with openssl" >&2
		rc=1
	fi
	return "$rc"
}

step "nats.conf template: nats-server -t"
if command -v nats-server >/dev/null; then
	run "nats.conf" check_nats_conf
else
	echo "skipped: nats-server not in PATH (Debian package nats-server)"
fi

step "go test ./deploy/terraform/ (HCL references, incl. examples/eks)"
run "hclcheck" bash -c "cd '$repo' && go test -count=1 ./deploy/terraform/"

echo
if ((${#failures[@]})); then
	printf 'tf-validate: FAILED steps: %s\n' "${failures[*]}" >&2
	exit 1
fi
echo "tf-validate: ok (fmt, init, validate, test, nats.conf, hclcheck)"
