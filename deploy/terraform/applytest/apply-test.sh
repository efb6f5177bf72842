#!/usr/bin/env bash
# apply-test.sh: the three-region deploy applied to a real Kubernetes control plane
# (make tf-apply-test, after make tf-validate, which builds the kubernetes provider it uses).
#
# No cluster, kubelet or container runtime is available here, so the control plane is built from
# Go modules (this directory's go.mod: k8s.io/kubernetes with its staging modules replaced by
# their releases at the same version, and the etcd server that release requires) and started on
# loopback: etcd, kube-apiserver (self-signed CA, static admin token, service-account key),
# kube-controller-manager and kube-scheduler; `applycheck kubelet` plays the kubelets of eight
# nodes, two in each of zone-a, zone-b, zone-c and zone-x, and makes their pods Running and Ready
# (cmd/applycheck/kubelet.go; it replaced kwok, whose build compiled a second copy of Kubernetes'
# client libraries).
# The four are one multi-call binary (cmd/controlplane) behind links of their names: one link,
# without debug information, takes a third of the CPU of four (docs/performance.md, CI time).
# The binaries are built once into $QUOTA_CACHE_DIR/applytest/<version>-<hash of their
# sources>/ (default ~/.cache/quota, like the provider) and never enter the repo.
#
# deploy/terraform is then applied, from a temporary copy, with three regions (eu, us, ap), each
# in its own namespace and each region's provider slot pointed at this one API server, and
# cmd/applycheck asserts through the API server:
#   1. every object in the state is on the server with the uid the provider recorded, and no
#      object labelled managed-by=terraform is missing from the state (apply succeeded: every
#      object was accepted, server-side validation and defaulting included); every Deployment,
#      StatefulSet and pod rolled out and Ready;
#   2. every pod is placed as its own constraints say: required node affinity (no pod in zone-x,
#      which no region lists), zone topology spread (limiters, maxSkew 1), required zone and
#      node anti-affinity (NATS);
#   3. every region's limiter and control-plane Secrets hold exactly that region's check and read
#      tokens and none of another region's (no limiter runs here: a token of one region is refused
#      in another because its limiters never get it);
#   4. every limiter process has a NATS credential of its own: from the API server, eu's NATS
#      config (ConfigMap), its servers' password environment (Secret nats-eu) and two eu limiter
#      pods' Secrets are read (applycheck natscreds), a real nats-server runs that config on
#      loopback, and pod A's credential publishes on its own usage and gossip subjects while pod
#      B's and region us's refuse it (the server's permissions violation, seen by the client;
#      natsprobe, a program of the main module), and A's password does not log in as B;
#   5. each PodDisruptionBudget of region eu grants as many evictions (Eviction API) as it
#      allows and refuses the next one with 429 (limiter and NATS: the second; Redis: the first);
#   6. changing Secrets (us's Redis password, the Postgres password) replaces exactly the pods
#      that read them (pod uids, Deployments' ReplicaSets, StatefulSets' revisions), and no other
#      object;
#   7. removing region ap by deploy/RUNBOOK.md's two steps: step 1 (decommission = true) deletes
#      namespace quota-ap and everything in it and replaces no other object; step 2 (the entry
#      deleted) plans no change and changes nothing;
#   8. terraform destroy leaves no namespace but the system ones and no object of the deploy.
# Every process is stopped, and the temporary directory removed, on exit.
#
# Environment: TERRAFORM (default /usr/local/bin/terraform), QUOTA_CACHE_DIR, GOPROXY as usual,
# APPLYTEST_TIMEOUT (each wait's deadline, default 5m), APPLYTEST_KEEP=1 keeps the work dir.
# With --prepare it only builds the binaries into the cache (if missing) and exits (.ci/run).
set -euo pipefail

prepare=false
case "${1:-}" in
"") ;;
--prepare) prepare=true ;;
*)
	echo "usage: apply-test.sh [--prepare]" >&2
	exit 2
	;;
esac

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tfsrc=$(cd "$here/.." && pwd)
repo=$(cd "$here/../../.." && pwd)

TERRAFORM=${TERRAFORM:-/usr/local/bin/terraform}
K8S_VERSION=$(sed -n 's/^require k8s.io\/kubernetes \(v[0-9.]*\)$/\1/p;s/^[[:space:]]*k8s.io\/kubernetes \(v[0-9.]*\)$/\1/p' "$here/go.mod" | head -1)
PROVIDER_VERSION=3.2.1 # validate.sh builds it
cache_dir=${QUOTA_CACHE_DIR:-${HOME:?set HOME or QUOTA_CACHE_DIR}/.cache/quota}
mirror=$cache_dir/terraform-plugins
timeout=${APPLYTEST_TIMEOUT:-5m}

step() { printf '\n==> %s\n' "$*"; }
fatal() {
	printf 'tf-apply-test: FAIL: %s\n' "$*" >&2
	exit 1
}

[[ -n $K8S_VERSION ]] || fatal "no k8s.io/kubernetes version in $here/go.mod"
[[ -x $TERRAFORM ]] || fatal "$TERRAFORM not found or not executable (see deploy/terraform/validate.sh)"
command -v go >/dev/null || fatal "go not found in PATH"
for tool in openssl curl jq nats-server; do
	command -v "$tool" >/dev/null || fatal "$tool not found in PATH (Debian package $tool)"
done
$prepare || ls "$mirror"/registry.terraform.io/hashicorp/kubernetes/"$PROVIDER_VERSION"/*/terraform-provider-kubernetes_v"$PROVIDER_VERSION" >/dev/null 2>&1 ||
	fatal "the kubernetes provider $PROVIDER_VERSION is not in $mirror: run make tf-validate first (it builds it)"

# hash_of FILES...: a short hash of the files' contents, the cache key of what they build.
hash_of() { cat "$@" | sha256sum | cut -c1-12; }

# go_here CMD ARGS...: the go command in this module, with the settings every build and test of it
# shares. They are part of the build cache's keys: applycheck's test, built without them, compiled
# client-go and its dependencies a second time after the control plane's build (3 minutes of both
# cores on a new machine).
go_here() {
	local cmd=$1
	shift
	(cd "$here" && CGO_ENABLED=0 GOFLAGS='-mod=readonly -buildvcs=false' go "$cmd" -trimpath "$@")
}

# build_into DIR PKGS...: builds PKGS of this module into DIR, atomically (a half-built directory
# is never taken for a cached one), without symbol table and DWARF (-s -w: a shorter link; a
# panic's stack trace keeps its function names, files and lines).
build_into() {
	local dir=$1 tmp
	shift
	tmp=$(mktemp -d "$(dirname "$dir")/.build.XXXXXX")
	if go_here build -ldflags='-s -w' -o "$tmp/" "$@"; then
		rm -rf "$dir"
		mv "$tmp" "$dir"
	else
		rm -rf "$tmp"
		return 1
	fi
}

mkdir -p "$cache_dir/applytest"
cp_dir=$cache_dir/applytest/k8s-$K8S_VERSION-$(hash_of "$here/go.mod" "$here/go.sum" "$here"/cmd/controlplane/main.go)
check_dir=$cache_dir/applytest/applycheck-$(hash_of "$here/go.mod" "$here/go.sum" "$here"/cmd/applycheck/*.go)

step "control-plane binaries: k8s.io/kubernetes $K8S_VERSION, etcd"
if [[ -x $cp_dir/kube-apiserver && -x $cp_dir/kube-controller-manager && -x $cp_dir/kube-scheduler && -x $cp_dir/etcd ]]; then
	echo "cached: $cp_dir"
else
	echo "building into $cp_dir (many minutes on the first run)"
	start=$SECONDS
	build_into "$cp_dir" ./cmd/controlplane || fatal "building the control plane failed (see go output above)"
	for name in etcd kube-apiserver kube-controller-manager kube-scheduler; do
		ln -sf controlplane "$cp_dir/$name"
	done
	echo "built in $((SECONDS - start))s"
fi
if [[ -x $check_dir/applycheck ]]; then
	echo "cached: $check_dir/applycheck"
else
	# Its own tests (the identity comparisons on hand-made snapshots) run when it is rebuilt.
	go_here test -count=1 ./cmd/applycheck ||
		fatal "go test ./cmd/applycheck failed"
	build_into "$check_dir" ./cmd/applycheck || fatal "building applycheck failed"
fi
$prepare && exit 0
bin=$cp_dir
check=$check_dir/applycheck

work=$(mktemp -d "${TMPDIR:-/tmp}/quota-applytest.XXXXXX")
pids=()
names=()
status=0
# cleanup stops every process this script started (TERM, then KILL after 10 s), and removes the
# work dir; on failure it shows the end of each process's log first.
cleanup() {
	status=$?
	local i pid
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill -TERM "${pids[i]}" 2>/dev/null || true
	done
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		pid=${pids[i]}
		for _ in $(seq 1 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	if ((status != 0)); then
		for i in "${!names[@]}"; do
			printf '\n--- last lines of %s.log ---\n' "${names[i]}" >&2
			tail -n 25 "$work/log/${names[i]}.log" >&2 || true
		done
	fi
	if [[ ${APPLYTEST_KEEP:-} == 1 ]]; then
		echo "kept: $work" >&2
	else
		chmod -R u+w "$work" 2>/dev/null || true
		rm -rf "$work"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$work/log" "$work/pki"
# natsprobe is of the main module (nats.go, internal/natsrole): built here, not cached, with the
# caller's GOFLAGS (.ci/run's overlay of package time) so that it reuses the tests' build of nats.go.
(cd "$repo" && GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=readonly -buildvcs=false" go build -o "$work/natsprobe" ./deploy/terraform/natsprobe) ||
	fatal "building deploy/terraform/natsprobe failed"
# run_bg NAME CMD...: starts CMD in the background, logging to log/NAME.log.
run_bg() {
	local name=$1
	shift
	"$@" >"$work/log/$name.log" 2>&1 &
	pids+=($!)
	names+=("$name")
}
# wait_for WHAT CMD...: polls CMD every 0.5 s for 120 s; fails naming WHAT.
wait_for() {
	local what=$1
	shift
	for _ in $(seq 1 240); do
		"$@" >/dev/null 2>&1 && return 0
		# A process that died will not become ready.
		for pid in "${pids[@]}"; do
			kill -0 "$pid" 2>/dev/null || fatal "a control-plane process exited while waiting for $what"
		done
		sleep 0.5
	done
	fatal "$what: not ready within 120 s"
}

step "control plane on loopback"
cp_start=$SECONDS
read -r etcd_port etcd_peer_port api_port kcm_port sched_port <<<"$("$check" freeport 5 | tr '\n' ' ')"
pki=$work/pki
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=quota-applytest-ca \
	-keyout "$pki/ca.key" -out "$pki/ca.crt" >/dev/null 2>&1
openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver \
	-keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" >/dev/null 2>&1
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$pki/san.ext"
openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
	-days 1 -extfile "$pki/san.ext" -out "$pki/apiserver.crt" >/dev/null 2>&1
openssl genrsa -out "$pki/sa.key" 2048 >/dev/null 2>&1
openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" >/dev/null 2>&1
token=$(openssl rand -hex 24)
printf '%s,quota-applytest-admin,quota-applytest-admin,system:masters\n' "$token" >"$pki/tokens.csv"
kubeconfig=$work/kubeconfig
cat >"$kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: applytest
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority: $pki/ca.crt
users:
- name: admin
  user:
    token: $token
contexts:
- name: applytest
  context:
    cluster: applytest
    user: admin
current-context: applytest
EOF
chmod 600 "$kubeconfig" "$pki/tokens.csv"

run_bg etcd "$bin/etcd" --name applytest --data-dir "$work/etcd" --unsafe-no-fsync --log-level warn \
	--listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
	--listen-peer-urls "http://127.0.0.1:$etcd_peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
	--initial-cluster "applytest=http://127.0.0.1:$etcd_peer_port"
wait_for etcd curl -fsS "http://127.0.0.1:$etcd_port/health"

run_bg kube-apiserver "$bin/kube-apiserver" \
	--etcd-servers "http://127.0.0.1:$etcd_port" \
	--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
	--endpoint-reconciler-type none \
	--tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
	--token-auth-file "$pki/tokens.csv" --authorization-mode RBAC \
	--service-account-issuer https://kubernetes.default.svc.cluster.local \
	--service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
	--service-cluster-ip-range 10.96.0.0/16 --allow-privileged=true --profiling=false
wait_for kube-apiserver curl -fsS --cacert "$pki/ca.crt" -H "Authorization: Bearer $token" \
	"https://127.0.0.1:$api_port/readyz"

# --node-monitor-grace-period 1h: the node lifecycle controller judges kubelet liveness by
# heartbeats, which a fake kubelet may send late on a starved CPU; it would then mark the node's
# pods NotReady, and a StatefulSet roll would wait. Kubelet liveness is not what this tests. (The controller stays: it lifts the not-ready taint that
# admission puts on new nodes.)
run_bg kube-controller-manager "$bin/kube-controller-manager" \
	--node-monitor-grace-period 1h \
	--kubeconfig "$kubeconfig" --authentication-kubeconfig "$kubeconfig" --authorization-kubeconfig "$kubeconfig" \
	--bind-address 127.0.0.1 --secure-port "$kcm_port" --leader-elect=false \
	--service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" --profiling=false
run_bg kube-scheduler "$bin/kube-scheduler" \
	--kubeconfig "$kubeconfig" --authentication-kubeconfig "$kubeconfig" --authorization-kubeconfig "$kubeconfig" \
	--bind-address 127.0.0.1 --secure-port "$sched_port" --leader-elect=false --profiling=false
run_bg kubelet "$check" -kubeconfig "$kubeconfig" kubelet
export APPLYTEST_KUBECONFIG=$kubeconfig
ck() { "$check" -kubeconfig "$kubeconfig" -timeout "$timeout" "$@"; }
ck cluster
echo "control plane up in $((SECONDS - cp_start))s (apiserver https://127.0.0.1:$api_port)"

step "terraform init (deploy/terraform, a temporary copy)"
tf=$work/terraform
cp -R "$tfsrc" "$tf"
rm -rf "$tf/applytest"
find "$tf" -name .terraform -type d -prune -exec rm -rf {} +
find "$tf" -name .terraform.lock.hcl -delete
find "$tf" -name '*.tfstate*' -delete
# modules/monitoring reads the alert rules and dashboards from deploy/ (path.module/../../..).
mkdir -p "$work/prometheus" "$work/grafana"
cp "$repo/deploy/prometheus/quota-rules.yaml" "$work/prometheus/"
cp "$repo"/deploy/grafana/*.json "$work/grafana/"
export TF_IN_AUTOMATION=1 TF_INPUT=0 CHECKPOINT_DISABLE=1
export TF_CLI_CONFIG_FILE=$work/terraformrc # empty: no credentials, no provider_installation
: >"$TF_CLI_CONFIG_FILE"
# The provider reads KUBE_* for attributes the deploy leaves null: none may leak in.
while read -r v; do unset "$v"; done < <(env | sed -n 's/^\(KUBE_[A-Z_]*\)=.*/\1/p')
"$TERRAFORM" -chdir="$tf" init -input=false -plugin-dir="$mirror" -no-color >"$work/log/init.log" 2>&1 || {
	cat "$work/log/init.log" >&2
	fatal "terraform init"
}

# Variables, as a var file (JSON): random secrets of the right shapes, fake image digests (no
# container runs). memberlist_keys is set for deploys that declare it (an undeclared
# variable in a var file is only a warning).
rnd() { openssl rand -hex 16; }
digest() { printf 'registry.invalid/%s@sha256:%s' "$1" "$(printf '%s' "$1" | sha256sum | cut -c1-64)"; }
jq -n \
	--arg kc "$kubeconfig" \
	--arg quota "$(digest quota)" --arg nats "$(digest nats)" --arg redis "$(digest redis)" --arg pg "$(digest postgres)" \
	--arg admin "$(rnd)" --arg pgpw "$(rnd)" \
	--arg ceu "$(rnd)" --arg cus "$(rnd)" --arg cap "$(rnd)" --arg xeu "$(rnd)" --arg xus "$(rnd)" --arg xap "$(rnd)" \
	--arg reu "$(rnd)" --arg rus "$(rnd)" --arg rap "$(rnd)" \
	--arg neu "$(rnd)" --arg nus "$(rnd)" --arg nap "$(rnd)" --arg ncp "$(rnd)" --arg nrec "$(rnd)" --arg ngw "$(rnd)" \
	--arg meu "$(openssl rand -base64 32)" --arg mus "$(openssl rand -base64 32)" --arg map "$(openssl rand -base64 32)" '
	def region($slot; $weight; $name): {
	  slot: $slot, weight: $weight,
	  kube: { config_path: $kc, context: "applytest" },
	  zones: ["zone-a", "zone-b", "zone-c"],
	  gateway_url: "nats://nats-\($name)-gateway.quota-\($name).svc.cluster.local:7222",
	  gateway_service_type: "ClusterIP",
	  limiter: { replicas: 4, qos: "Burstable", cpu_request: "100m", memory_request: "64Mi", data_volume_size: "1Gi" },
	  nats: { replicas: 3, storage_size: "1Gi", max_file_store: "512M" },
	  redis: { storage_size: "1Gi" }
	};
	{
	  images: { quota: $quota, nats: $nats, redis: $redis, postgres: $pg },
	  ledger_region: "eu",
	  ledger: { postgres: { development_in_cluster: true, storage_size: "1Gi" } },
	  regions: { eu: region(0; 0.5; "eu"), us: region(1; 0.3; "us"), ap: region(2; 0.2; "ap") },
	  admin_token: $admin,
	  postgres_password: $pgpw,
	  check_tokens: { eu: [$ceu], us: [$cus], ap: [$cap] },
	  read_tokens: { eu: [$xeu], us: [$xus], ap: [$xap] },
	  redis_passwords: { eu: $reu, us: $rus, ap: $rap },
	  nats_passwords: { "limiter-eu": $neu, "limiter-us": $nus, "limiter-ap": $nap,
	                    "control-plane": $ncp, reconciler: $nrec, gateway: $ngw },
	  memberlist_keys: { eu: [$meu], us: [$mus], ap: [$map] }
	}' >"$work/vars.json"
chmod 600 "$work/vars.json"

# apply NAME: terraform apply with vars.json, timed, output in log/NAME.log.
#
# Known provider bug: hashicorp/kubernetes 3.2.1 (and the commit validate.sh builds) returns
# "Missing Resource Identity After Update" for every kubernetes_stateful_set_v1 with
# wait_for_rollout = true that it updated in place (its Update returns before the Read that sets
# the identity; upstream issue #2926, fixed by PR #2967 after 3.2.1). The update and the rollout
# did happen, but the apply stops there, so what depends on that StatefulSet (the limiters wait
# for NATS) is applied only by the next apply. Unless APPLYTEST_STRICT=1, an apply that fails
# with that error and no other is repeated (at most 3 times), and the plan after it must be
# empty; each repetition is reported.
provider_bug_applies=0
apply() {
	local name=$1 start=$SECONDS try log errors
	for try in 1 2 3 4; do
		log=$work/log/$name.$try.log
		if "$TERRAFORM" -chdir="$tf" apply -auto-approve -input=false -no-color -var-file="$work/vars.json" >"$log" 2>&1; then
			grep -E '^(Apply complete|Destroy complete)' "$log" || true
			if ((try > 1)); then
				plan_empty "$name-after-retries"
			fi
			echo "$name: $((SECONDS - start))s"
			return 0
		fi
		errors=$(grep -c '^Error: ' "$log" || true)
		if [[ ${APPLYTEST_STRICT:-} == 1 || $try == 4 ]] ||
			((errors != $(grep -c '^Error: Missing Resource Identity After Update' "$log" || true))); then
			tail -n 60 "$log" >&2
			fatal "terraform apply ($name)"
		fi
		provider_bug_applies=$((provider_bug_applies + 1))
		echo "KNOWN PROVIDER BUG (hashicorp/terraform-provider-kubernetes#2926): $errors StatefulSet update(s) applied but reported as failed; applying again"
		grep -A3 '^Error: Missing Resource Identity After Update' "$log" | sed -n 's/^  with \(.*\),$/  \1/p'
	done
}

# plan_empty NAME: terraform plan must propose no change to any resource (outputs may change:
# step 2 of removing a region changes output kube_targets only).
plan_empty() {
	local name=$1 rc=0 changes
	"$TERRAFORM" -chdir="$tf" plan -detailed-exitcode -input=false -no-color -var-file="$work/vars.json" \
		-out="$work/plan-$name.bin" >"$work/log/plan-$name.log" 2>&1 || rc=$?
	if ((rc == 2)); then
		changes=$("$TERRAFORM" -chdir="$tf" show -json "$work/plan-$name.bin" |
			jq -r '.resource_changes[]? | select(.change.actions != ["no-op"]) | "\(.change.actions | join(",")) \(.address)"')
		if [[ -z $changes ]]; then
			echo "plan $name: no resource changes (outputs only)"
			return 0
		fi
		echo "$changes" >&2
	fi
	if ((rc != 0)); then
		tail -n 60 "$work/log/plan-$name.log" >&2
		fatal "plan $name is not empty (terraform plan -detailed-exitcode: $rc)"
	fi
	echo "plan $name: no changes"
}

step "apply: three regions (eu, us, ap) in namespaces quota-<region>, all slots on this API server"
apply apply-3-regions
ck rollout
"$TERRAFORM" -chdir="$tf" show -json >"$work/state.json"
ck state "$work/state.json"

step "tokens: every region's Secrets hold its own check and read tokens, no other region's"
ck tokens "$work/vars.json"

step "NATS: eu limiter pod A's credential is refused on pod B's and region us's subjects"
ck natscreds quota-eu quota-us "$work/nats-eu"
"$work/natsprobe" -dir "$work/nats-eu" || fatal "natsprobe: a limiter pod's NATS credential (above)"

step "placement: node affinity, zone spread, anti-affinity"
ck spread

step "PodDisruptionBudgets of eu: the Eviction API refuses what the budget does not allow"
ck pdb quota-eu
ck rollout

step "changing Secrets (us's Redis password, the Postgres password) rolls exactly their pods"
ck snapshot "$work/snap-1.json"
jq --arg rus "$(rnd)" --arg pgpw "$(rnd)" '.redis_passwords.us = $rus | .postgres_password = $pgpw' \
	"$work/vars.json" >"$work/vars.new" && mv "$work/vars.new" "$work/vars.json"
apply apply-secret-change
ck rollout
ck snapshot "$work/snap-2.json"
ck secret-roll "$work/snap-1.json" "$work/snap-2.json"

step "removing region ap, step 1: decommission = true"
jq '.regions.ap.decommission = true' "$work/vars.json" >"$work/vars.new" && mv "$work/vars.new" "$work/vars.json"
apply apply-decommission-ap
ck rollout
ck snapshot "$work/snap-3.json"
ck removed "$work/snap-2.json" "$work/snap-3.json" quota-ap

step "removing region ap, step 2: the entry and its passwords deleted (plan must be empty)"
jq 'del(.regions.ap) | del(.redis_passwords.ap) | del(.nats_passwords["limiter-ap"]) | del(.memberlist_keys.ap)' \
	"$work/vars.json" >"$work/vars.new" && mv "$work/vars.new" "$work/vars.json"
plan_empty delete-ap
apply apply-delete-ap
ck snapshot "$work/snap-4.json"
ck unchanged "$work/snap-3.json" "$work/snap-4.json"

step "terraform destroy"
start=$SECONDS
if ! "$TERRAFORM" -chdir="$tf" destroy -auto-approve -input=false -no-color -var-file="$work/vars.json" \
	>"$work/log/destroy.log" 2>&1; then
	tail -n 60 "$work/log/destroy.log" >&2
	fatal "terraform destroy"
fi
grep -E '^Destroy complete' "$work/log/destroy.log" || true
echo "destroy: $((SECONDS - start))s"
ck empty

echo
if ((provider_bug_applies > 0)); then
	echo "note: $provider_bug_applies apply(s) repeated for the provider's StatefulSet identity bug (see apply() above)"
fi
echo "tf-apply-test: ok (apply, per-process NATS credentials, placement, PDB, Secret roll, region removal, destroy) in $SECONDS s"
