# Plans modules/region and modules/ledger on their own (run "module" blocks) against a mocked
# kubernetes provider, so that assertions can read their resources: the Secrets hold the tokens,
# the Deployments read them by secretKeyRef (never a literal value or an argument), the
# NetworkPolicies admit the configured namespaces only, and the grace periods cover the shutdown
# delay plus the drain.

mock_provider "kubernetes" {}

run "region_tokens_network_shutdown" {
  command = plan

  module {
    source = "./modules/region"
  }

  variables {
    spec = {
      name        = "eu"
      namespace   = "quota"
      images      = { quota = "registry.example.com/quota@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", nats = "nats@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", redis = "redis@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" }
      weights     = { eu = 0.6, us = 0.4 }
      gateway_url = "nats://gw.eu.example.com:7222"
      peers       = { us = "nats://gw.us.example.com:7222" }
      limiter     = { shutdown_delay_seconds = 7, drain_seconds = 15 }
      # The control region (control_region null = this one) and the ledger region.
      reconciler_namespace  = "quota"
      gateway_source_ranges = ["198.51.100.0/24", "203.0.113.7/32"]
      # Plain gateways, stated (region_nats_tls covers TLS).
      gateway_insecure_plaintext = true
      network = {
        api_client_namespaces       = ["checkout", "search"]
        api_client_namespace_labels = { "quota.dev/client" = "true" }
        prometheus_namespace        = "monitoring"
        admin_client_namespaces     = ["ops"]
        nats_monitor_namespaces     = ["nats-monitoring"]
      }
    }
    admin_token     = "TEST-ADMIN-TOKEN-0123456789"
    memberlist_keys = ["VEVTVC1NRU1CRVJMSVNULUtFWS1FVS0wMTIzNDU2Nzg="]
    redis_password  = "TEST-REDIS-EU"
    nats_passwords = {
      "limiter-eu"    = "TEST-NATS-LIMITER-EU-0001"
      "limiter-us"    = "TEST-NATS-LIMITER-US-0001"
      "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
      "reconciler"    = "TEST-NATS-RECONCILER-0001"
      "gateway"       = "TEST-NATS-GATEWAY-000001"
    }
    check_tokens = ["TEST-CHECK-TOKEN-0001", "TEST-CHECK-TOKEN-0002"]
    read_tokens  = ["TEST-READ-TOKEN-00001"]
  }

  # The Secret holds the token lists, comma-joined (the daemon's flag format).
  assert {
    condition     = kubernetes_secret_v1.limiter.data["check-token"] == "TEST-CHECK-TOKEN-0001,TEST-CHECK-TOKEN-0002"
    error_message = "the limiter Secret must hold the check tokens under check-token"
  }
  assert {
    condition     = kubernetes_secret_v1.limiter.data["read-token"] == "TEST-READ-TOKEN-00001"
    error_message = "the limiter Secret must hold the read tokens under read-token"
  }

  # The Deployment reads them from that Secret by secretKeyRef.
  assert {
    condition = alltrue([
      for name, key in { QUOTA_CHECK_TOKEN = "check-token", QUOTA_READ_TOKEN = "read-token", QUOTA_MEMBERLIST_KEY = "memberlist-key" } :
      [
        for e in values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].env :
        "${e.value_from[0].secret_key_ref[0].name}/${e.value_from[0].secret_key_ref[0].key}" if e.name == name
      ] == ["${kubernetes_secret_v1.limiter.metadata[0].name}/${key}"]
    ])
    error_message = "QUOTA_CHECK_TOKEN, QUOTA_READ_TOKEN and QUOTA_MEMBERLIST_KEY must come from the limiter Secret by secretKeyRef"
  }
  assert {
    condition = !anytrue([
      for e in values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].env :
      e.value != null && strcontains(coalesce(e.value, "-"), "TEST-")
    ])
    error_message = "a secret is set as a literal environment value"
  }
  assert {
    condition     = !anytrue([for a in values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].args : strcontains(a, "TEST-") || startswith(a, "--check-token") || startswith(a, "--read-token")])
    error_message = "a token is in the limiter arguments"
  }
  assert {
    condition     = !strcontains(jsonencode(values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].metadata[0].annotations), "TEST-")
    error_message = "a secret is in the pod annotations"
  }

  # Graceful stop: explicit --shutdown-delay, grace > delay + drain, /readyz readiness, no preStop.
  assert {
    condition     = contains(values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].args, "--shutdown-delay=7s")
    error_message = "--shutdown-delay must be passed explicitly"
  }
  assert {
    condition     = values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].termination_grace_period_seconds > 7 + 15
    error_message = "terminationGracePeriodSeconds (${values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].termination_grace_period_seconds}) must exceed shutdown delay + drain (22)"
  }
  assert {
    condition     = values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].readiness_probe[0].http_get[0].path == "/readyz"
    error_message = "the readiness probe must be /readyz"
  }
  assert {
    condition     = length(values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].lifecycle) == 0
    error_message = "no preStop hook: the daemon implements the shutdown delay"
  }

  # NetworkPolicy: HTTP from the named namespaces and the labelled ones, Prometheus separately,
  # memberlist from this region's limiters.
  assert {
    condition = (
      kubernetes_network_policy_v1.limiter.spec[0].policy_types == tolist(["Ingress", "Egress"]) &&
      kubernetes_network_policy_v1.limiter.spec[0].pod_selector[0].match_labels == tomap({ "app.kubernetes.io/name" = "regional-limiter", "quota.dev/region" = "eu" })
    )
    error_message = "the NetworkPolicy must select this region's limiters, for ingress"
  }
  assert {
    condition = (
      kubernetes_network_policy_v1.limiter.spec[0].ingress[0].ports[0].port == "8080" &&
      length(kubernetes_network_policy_v1.limiter.spec[0].ingress[0].from) == 2 &&
      kubernetes_network_policy_v1.limiter.spec[0].ingress[0].from[0].namespace_selector[0].match_expressions[0].key == "kubernetes.io/metadata.name" &&
      kubernetes_network_policy_v1.limiter.spec[0].ingress[0].from[0].namespace_selector[0].match_expressions[0].operator == "In" &&
      kubernetes_network_policy_v1.limiter.spec[0].ingress[0].from[0].namespace_selector[0].match_expressions[0].values == toset(["checkout", "search"]) &&
      kubernetes_network_policy_v1.limiter.spec[0].ingress[0].from[1].namespace_selector[0].match_labels == tomap({ "quota.dev/client" = "true" })
    )
    error_message = "HTTP ingress must list the API namespaces and the label selector: ${jsonencode(kubernetes_network_policy_v1.limiter.spec[0].ingress[0])}"
  }
  # Envoy's rate limit service is on by default, with the rules from the catalogue: port 8081
  # on the Service, open to the API clients as 8080 is. No tracing, no hot-key metrics.
  assert {
    condition = (
      contains(values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].args, "--grpc-listen=:8081") &&
      contains(values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].args, "--rls-config=catalog:") &&
      !anytrue([for a in values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].args : startswith(a, "--otlp-endpoint") || startswith(a, "--hotkey-metrics") || startswith(a, "--rls-response-headers")]) &&
      contains([for p in values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].port : "${p.name}/${p.container_port}"], "grpc/8081") &&
      contains([for p in kubernetes_service_v1.limiter.spec[0].port : "${p.name}/${p.port}/${p.target_port}"], "grpc/8081/8081") &&
      toset([for p in kubernetes_network_policy_v1.limiter.spec[0].ingress[0].ports : p.port]) == toset(["8080", "8081"]) &&
      [for p in kubernetes_network_policy_v1.limiter.spec[0].ingress[1].ports : p.port] == ["8080"]
    )
    error_message = "the rate limit service must be on at :8081 for the API clients: ${jsonencode(kubernetes_service_v1.limiter.spec[0].port)}"
  }
  assert {
    condition = (
      length(kubernetes_network_policy_v1.limiter.spec[0].ingress) == 3 &&
      kubernetes_network_policy_v1.limiter.spec[0].ingress[1].ports[0].port == "8080" &&
      kubernetes_network_policy_v1.limiter.spec[0].ingress[1].from[0].namespace_selector[0].match_labels == tomap({ "kubernetes.io/metadata.name" = "monitoring" })
    )
    error_message = "Prometheus' namespace must reach :8080"
  }
  assert {
    condition = (
      toset([for p in kubernetes_network_policy_v1.limiter.spec[0].ingress[2].ports : "${p.port}/${p.protocol}"]) == toset(["7946/TCP", "7946/UDP"]) &&
      kubernetes_network_policy_v1.limiter.spec[0].ingress[2].from[0].pod_selector[0].match_labels == tomap({ "app.kubernetes.io/name" = "regional-limiter", "quota.dev/region" = "eu" })
    )
    error_message = "memberlist (7946 TCP+UDP) must be open between this region's limiters"
  }

  # NATS: the servers' Secret holds every user's password, double-quoted (nats-server parses an
  # environment value as config); the users that connect here have their real one. Each of this
  # region's three limiter processes is a user of its own, with a password derived from
  # limiter-eu's, which itself is in no Secret.
  assert {
    condition     = toset(keys(kubernetes_secret_v1.nats.data)) == toset(["limiter-eu.limiter-eu-0", "limiter-eu.limiter-eu-1", "limiter-eu.limiter-eu-2", "limiter-us", "control-plane", "reconciler", "gateway"])
    error_message = "Secret nats-eu must hold one key per NATS user (one per eu limiter process, none for all of them)"
  }
  assert {
    condition = alltrue([
      for u, p in {
        "limiter-eu.limiter-eu-0" = sha256("quota-nats-process-password\neu\nlimiter-eu-0\nTEST-NATS-LIMITER-EU-0001")
        "limiter-eu.limiter-eu-1" = sha256("quota-nats-process-password\neu\nlimiter-eu-1\nTEST-NATS-LIMITER-EU-0001")
        "limiter-eu.limiter-eu-2" = sha256("quota-nats-process-password\neu\nlimiter-eu-2\nTEST-NATS-LIMITER-EU-0001")
        "control-plane"           = "TEST-NATS-CONTROL-PLANE-01"
        "reconciler"              = "TEST-NATS-RECONCILER-0001"
        "gateway"                 = "TEST-NATS-GATEWAY-000001"
      } : kubernetes_secret_v1.nats.data[u] == "\"${p}\""
    ]) && !strcontains(jsonencode(kubernetes_secret_v1.nats.data), "TEST-NATS-LIMITER-EU")
    error_message = "the control and ledger region's NATS Secret must hold the real, quoted passwords of its limiter processes, control-plane, reconciler and gateway, and not limiter-eu's root password"
  }
  assert {
    condition     = startswith(kubernetes_secret_v1.nats.data["limiter-us"], "\"disabled-") && !strcontains(kubernetes_secret_v1.nats.data["limiter-us"], "TEST-NATS-LIMITER-US")
    error_message = "another region's limiter user must be disabled here (a password no client has)"
  }
  assert {
    condition = alltrue([
      for u, env in { "limiter-eu.limiter-eu-0" = "QUOTA_NATS_PASSWORD_LIMITER_EU_LIMITER_EU_0", "limiter-eu.limiter-eu-2" = "QUOTA_NATS_PASSWORD_LIMITER_EU_LIMITER_EU_2", "limiter-us" = "QUOTA_NATS_PASSWORD_LIMITER_US", "control-plane" = "QUOTA_NATS_PASSWORD_CONTROL_PLANE", "reconciler" = "QUOTA_NATS_PASSWORD_RECONCILER", "gateway" = "QUOTA_NATS_PASSWORD_GATEWAY" } :
      [
        for e in kubernetes_stateful_set_v1.nats.spec[0].template[0].spec[0].container[0].env :
        "${e.value_from[0].secret_key_ref[0].name}/${e.value_from[0].secret_key_ref[0].key}" if e.name == env
      ] == ["nats-eu/${u}"]
    ])
    error_message = "every QUOTA_NATS_PASSWORD_<USER> of the NATS pods must come from Secret nats-eu by secretKeyRef"
  }
  assert {
    condition = (
      length(kubernetes_stateful_set_v1.nats.spec[0].template[0].spec[0].container[0].env) == 8 &&
      !anytrue([for e in kubernetes_stateful_set_v1.nats.spec[0].template[0].spec[0].container[0].env : strcontains(coalesce(e.value, "-"), "TEST-")]) &&
      !strcontains(jsonencode(kubernetes_stateful_set_v1.nats.spec[0].template[0].spec[0].container[0].args), "TEST-") &&
      contains(keys(kubernetes_stateful_set_v1.nats.spec[0].template[0].metadata[0].annotations), "quota.dev/secret-hash") &&
      !strcontains(jsonencode(kubernetes_stateful_set_v1.nats.spec[0].template[0].metadata[0].annotations), "TEST-") &&
      kubernetes_stateful_set_v1.nats.wait_for_rollout
    )
    error_message = "NATS pods: POD_NAME plus 7 password variables, no literal secret, a secret-hash annotation (a new password rolls them), wait_for_rollout"
  }
  # The rendered config: every user, each limiter process's own subjects and inbox, the control
  # region (which may not publish as a process), gateway auth; no password, no TLS unless asked;
  # no user for all of eu's limiters.
  assert {
    condition = (alltrue([for want in [
      "user: \"limiter-eu.limiter-eu-0\"", "user: \"limiter-eu.limiter-eu-2\"", "user: \"limiter-us\"", "user: \"control-plane\"", "user: \"reconciler\"", "user: \"gateway\"",
      "password: $QUOTA_NATS_PASSWORD_LIMITER_EU_LIMITER_EU_1", "password: $QUOTA_NATS_PASSWORD_LIMITER_US", "password: $QUOTA_NATS_PASSWORD_CONTROL_PLANE",
      "password: $QUOTA_NATS_PASSWORD_RECONCILER", "password: $QUOTA_NATS_PASSWORD_GATEWAY",
      "\"quota.usage.eu.limiter-eu-1\"", "\"quota.gossip.eu.limiter-eu-2\"", "\"_INBOX.limiter-eu.limiter-eu-0.>\"", "\"quota.gossip.us.>\"", "\"$KV.quota-catalog.>\"", "$JS.API.CONSUMER.MSG.NEXT.QUOTA_USAGE.*",
      "reject_unknown_cluster: true", "listen: \"0.0.0.0:4222\"", "http: \"0.0.0.0:8222\"", "listen: \"0.0.0.0:6222\"", "listen: \"0.0.0.0:7222\"",
      ] : strcontains(kubernetes_config_map_v1.nats.data["nats.conf"], want)
      ]) && !strcontains(kubernetes_config_map_v1.nats.data["nats.conf"], "TEST-") && !strcontains(kubernetes_config_map_v1.nats.data["nats.conf"], "tls {") &&
      !strcontains(kubernetes_config_map_v1.nats.data["nats.conf"], "user: \"limiter-eu\"") && !strcontains(kubernetes_config_map_v1.nats.data["nats.conf"], "$QUOTA_NATS_PASSWORD_LIMITER_EU\n") &&
      length(regexall("deny: \\[", kubernetes_config_map_v1.nats.data["nats.conf"])) == 1
    )
    error_message = "nats.conf must define every user with its password variable, the region's subjects, gateway auth, and no password or TLS:\n${kubernetes_config_map_v1.nats.data["nats.conf"]}"
  }

  # The limiters: one single-replica StatefulSet per process, each selecting its own pod, with
  # its own NATS user, process identity and password Secret (no other process's); R3 usage
  # stream (3 NATS servers), no catalogue writes.
  assert {
    condition = (
      toset(keys(kubernetes_stateful_set_v1.limiter)) == toset(["limiter-eu-0", "limiter-eu-1", "limiter-eu-2"]) &&
      alltrue([for p, s in kubernetes_stateful_set_v1.limiter :
        s.metadata[0].name == p && tostring(s.spec[0].replicas) == "1" &&
        s.spec[0].selector[0].match_labels == tomap({ "app.kubernetes.io/name" = "regional-limiter", "quota.dev/region" = "eu", "quota.dev/process" = p }) &&
        s.spec[0].template[0].metadata[0].labels["quota.dev/process"] == p &&
        contains(s.spec[0].template[0].spec[0].container[0].args, "--nats-user=limiter-eu.${p}") &&
        length([for a in s.spec[0].template[0].spec[0].container[0].args : a if startswith(a, "--nats-user=")]) == 1 &&
        [for e in s.spec[0].template[0].spec[0].container[0].env : e.value if e.name == "QUOTA_PROCESS_ID"] == [p] &&
        [for e in s.spec[0].template[0].spec[0].container[0].env : "${e.value_from[0].secret_key_ref[0].name}/${e.value_from[0].secret_key_ref[0].key}" if e.name == "QUOTA_NATS_PASSWORD"] == ["quota-nats-${p}/nats-password"] &&
        kubernetes_secret_v1.limiter_nats[p].data == tomap({ "nats-password" = sha256("quota-nats-process-password\neu\n${p}\nTEST-NATS-LIMITER-EU-0001") })
      ])
    )
    error_message = "one StatefulSet per limiter process, each with its own selector, NATS user, QUOTA_PROCESS_ID and NATS password Secret"
  }
  assert {
    condition = (
      contains(values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].args, "--usage-stream-replicas=3") &&
      contains(values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].args, "--usage-stream-max-bytes=1073741824") &&
      contains(values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].args, "--catalog-replicas=3") &&
      !anytrue([for a in values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].args : startswith(a, "--control-plane") || startswith(a, "--nats-password") || startswith(a, "--nats-tls")])
    )
    error_message = "limiter args: ${jsonencode(values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].args)}"
  }
  assert {
    condition     = !contains(keys(kubernetes_secret_v1.limiter.data), "nats-password") && !strcontains(jsonencode(kubernetes_secret_v1.limiter.data), "TEST-NATS-") && length(distinct([for p, s in kubernetes_secret_v1.limiter_nats : s.data["nats-password"]])) == 3
    error_message = "the region's shared limiter Secret must hold no NATS password; each process's own is distinct"
  }

  # The control plane: one process, --control-plane, its own user, Secret, Service and policy.
  assert {
    condition = (
      length(kubernetes_deployment_v1.control_plane) == 1 &&
      tostring(kubernetes_deployment_v1.control_plane[0].spec[0].replicas) == "1" &&
      alltrue([for a in ["--control-plane", "--nats-user=control-plane", "--region=eu", "--catalog-replicas=3", "--usage-stream-replicas=3", "--nats=nats://nats-eu.quota.svc.cluster.local:4222"] :
      contains(kubernetes_deployment_v1.control_plane[0].spec[0].template[0].spec[0].container[0].args, a)]) &&
      !anytrue([for a in kubernetes_deployment_v1.control_plane[0].spec[0].template[0].spec[0].container[0].args : startswith(a, "--memberlist") || strcontains(a, "TEST-")])
    )
    error_message = "control-plane args: ${jsonencode(kubernetes_deployment_v1.control_plane[0].spec[0].template[0].spec[0].container[0].args)}"
  }
  assert {
    condition = alltrue([
      for name, key in { QUOTA_NATS_PASSWORD = "nats-password", QUOTA_ADMIN_TOKEN = "admin-token", QUOTA_REDIS = "redis-url", QUOTA_CHECK_TOKEN = "check-token" } :
      [
        for e in kubernetes_deployment_v1.control_plane[0].spec[0].template[0].spec[0].container[0].env :
        "${e.value_from[0].secret_key_ref[0].name}/${e.value_from[0].secret_key_ref[0].key}" if e.name == name
      ] == ["quota-control-plane-eu/${key}"]
    ]) && kubernetes_secret_v1.control_plane[0].data["nats-password"] == "TEST-NATS-CONTROL-PLANE-01"
    error_message = "the control plane must read its secrets from Secret quota-control-plane-eu, which holds the control-plane NATS password"
  }
  assert {
    condition = (
      kubernetes_service_v1.control_plane[0].spec[0].selector == tomap({ "app.kubernetes.io/name" = "control-plane", "quota.dev/region" = "eu" }) &&
      !alltrue([for k, v in kubernetes_service_v1.limiter.spec[0].selector : lookup(kubernetes_deployment_v1.control_plane[0].spec[0].template[0].metadata[0].labels, k, "") == v])
    )
    error_message = "the control plane has its own Service, and the check Service limiter-eu must not select it"
  }
  assert {
    condition = (
      kubernetes_network_policy_v1.control_plane[0].spec[0].pod_selector[0].match_labels == tomap({ "app.kubernetes.io/name" = "control-plane", "quota.dev/region" = "eu" }) &&
      length(kubernetes_network_policy_v1.control_plane[0].spec[0].ingress) == 2 &&
      kubernetes_network_policy_v1.control_plane[0].spec[0].ingress[0].ports[0].port == "8080" &&
      kubernetes_network_policy_v1.control_plane[0].spec[0].ingress[0].from[0].namespace_selector[0].match_expressions[0].values == toset(["ops"]) &&
      kubernetes_network_policy_v1.control_plane[0].spec[0].ingress[1].from[0].namespace_selector[0].match_labels == tomap({ "kubernetes.io/metadata.name" = "monitoring" })
    )
    error_message = "the control plane's :8080 must admit the admin namespaces and Prometheus only"
  }

  # The gateway Service: only the source ranges, client addresses kept for the NetworkPolicy.
  assert {
    condition = (
      kubernetes_service_v1.nats_gateway.spec[0].type == "LoadBalancer" &&
      kubernetes_service_v1.nats_gateway.spec[0].load_balancer_source_ranges == toset(["198.51.100.0/24", "203.0.113.7/32"]) &&
      kubernetes_service_v1.nats_gateway.spec[0].external_traffic_policy == "Local"
    )
    error_message = "the gateway LoadBalancer must be restricted to gateway_source_ranges, with externalTrafficPolicy Local"
  }

  # NATS NetworkPolicy: clients = limiters, control plane, reconciler; routes = this region's
  # servers; gateways = the source ranges; monitor = the monitoring namespaces.
  assert {
    condition = (
      kubernetes_network_policy_v1.nats.spec[0].pod_selector[0].match_labels == tomap({ "app.kubernetes.io/name" = "nats", "quota.dev/region" = "eu" }) &&
      kubernetes_network_policy_v1.nats.spec[0].policy_types == tolist(["Ingress"]) &&
      length(kubernetes_network_policy_v1.nats.spec[0].ingress) == 4
    )
    error_message = "the NATS NetworkPolicy must select this region's servers with four ingress rules: ${jsonencode(kubernetes_network_policy_v1.nats.spec[0].ingress)}"
  }
  assert {
    condition = (
      [for p in kubernetes_network_policy_v1.nats.spec[0].ingress[0].ports : p.port] == ["4222"] &&
      length(kubernetes_network_policy_v1.nats.spec[0].ingress[0].from) == 3 &&
      kubernetes_network_policy_v1.nats.spec[0].ingress[0].from[0].pod_selector[0].match_labels == tomap({ "app.kubernetes.io/name" = "regional-limiter", "quota.dev/region" = "eu" }) &&
      length(kubernetes_network_policy_v1.nats.spec[0].ingress[0].from[0].namespace_selector) == 0 &&
      kubernetes_network_policy_v1.nats.spec[0].ingress[0].from[1].pod_selector[0].match_labels == tomap({ "app.kubernetes.io/name" = "control-plane", "quota.dev/region" = "eu" }) &&
      kubernetes_network_policy_v1.nats.spec[0].ingress[0].from[2].pod_selector[0].match_labels == tomap({ "app.kubernetes.io/name" = "reconciler", "quota.dev/region" = "eu" }) &&
      kubernetes_network_policy_v1.nats.spec[0].ingress[0].from[2].namespace_selector[0].match_labels == tomap({ "kubernetes.io/metadata.name" = "quota" })
    )
    error_message = "NATS :4222 must admit the limiters, the control plane and the reconciler only: ${jsonencode(kubernetes_network_policy_v1.nats.spec[0].ingress[0])}"
  }
  assert {
    condition = (
      [for p in kubernetes_network_policy_v1.nats.spec[0].ingress[1].ports : p.port] == ["6222"] &&
      length(kubernetes_network_policy_v1.nats.spec[0].ingress[1].from) == 1 &&
      kubernetes_network_policy_v1.nats.spec[0].ingress[1].from[0].pod_selector[0].match_labels == tomap({ "app.kubernetes.io/name" = "nats", "quota.dev/region" = "eu" })
    )
    error_message = "NATS :6222 (routes) must admit this region's servers only"
  }
  assert {
    condition = (
      [for p in kubernetes_network_policy_v1.nats.spec[0].ingress[2].ports : p.port] == ["7222"] &&
      [for f in kubernetes_network_policy_v1.nats.spec[0].ingress[2].from : f.ip_block[0].cidr] == ["198.51.100.0/24", "203.0.113.7/32"]
    )
    error_message = "NATS :7222 (gateways) must admit the source ranges: ${jsonencode(kubernetes_network_policy_v1.nats.spec[0].ingress[2])}"
  }
  assert {
    condition = (
      [for p in kubernetes_network_policy_v1.nats.spec[0].ingress[3].ports : p.port] == ["8222"] &&
      kubernetes_network_policy_v1.nats.spec[0].ingress[3].from[0].namespace_selector[0].match_expressions[0].values == toset(["nats-monitoring"])
    )
    error_message = "NATS :8222 must admit the monitoring namespaces only"
  }

  # Redis: this region's limiters and the control plane.
  assert {
    condition = (
      kubernetes_network_policy_v1.redis[0].spec[0].pod_selector[0].match_labels == tomap({ "app.kubernetes.io/name" = "redis", "quota.dev/region" = "eu" }) &&
      length(kubernetes_network_policy_v1.redis[0].spec[0].ingress) == 1 &&
      [for p in kubernetes_network_policy_v1.redis[0].spec[0].ingress[0].ports : p.port] == ["6379"] &&
      [for f in kubernetes_network_policy_v1.redis[0].spec[0].ingress[0].from : f.pod_selector[0].match_labels["app.kubernetes.io/name"]] == ["regional-limiter", "control-plane"] &&
      alltrue([for f in kubernetes_network_policy_v1.redis[0].spec[0].ingress[0].from : f.pod_selector[0].match_labels["quota.dev/region"] == "eu" && length(f.namespace_selector) == 0])
    )
    error_message = "Redis :6379 must admit this region's limiters and control plane only"
  }
}

run "region_default_network_is_own_namespace" {
  command = plan

  module {
    source = "./modules/region"
  }

  variables {
    # Not the control region, not the ledger region, one NATS server, gateways in one cluster.
    spec = {
      name                 = "us"
      namespace            = "quota-us"
      images               = { quota = "registry.example.com/quota@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", nats = "nats@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", redis = "redis@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" }
      weights              = { eu = 0.6, us = 0.4 }
      gateway_url          = "nats://nats-us-gateway.quota-us.svc.cluster.local:7222"
      gateway_service_type = "ClusterIP"
      peers                = { eu = "nats://nats-eu-gateway.quota-eu.svc.cluster.local:7222" }
      control_region       = "eu"
      nats                 = { replicas = 1 }
      network              = { peer_namespaces = ["quota-eu"], otlp_namespaces = ["observability"] }
      # No rate limit service; hot-key metrics and tracing on.
      limiter       = { grpc_port = 0, hotkey_metrics = 3 }
      otlp_endpoint = "http://otel-collector.observability:4318"
    }
    admin_token     = "TEST-ADMIN-TOKEN-0123456789"
    memberlist_keys = ["VEVTVC1NRU1CRVJMSVNULUtFWS1FVS0wMTIzNDU2Nzg="]
    redis_password  = "TEST-REDIS-US"
    nats_passwords = {
      "limiter-eu"    = "TEST-NATS-LIMITER-EU-0001"
      "limiter-us"    = "TEST-NATS-LIMITER-US-0001"
      "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
      "reconciler"    = "TEST-NATS-RECONCILER-0001"
      "gateway"       = "TEST-NATS-GATEWAY-000001"
    }
    check_tokens = ["TEST-CHECK-TOKEN-0001"]
  }

  assert {
    condition = (
      !anytrue([for a in values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].args : startswith(a, "--grpc-listen") || startswith(a, "--rls-config")]) &&
      contains(values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].args, "--hotkey-metrics=3") &&
      contains(values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].args, "--otlp-endpoint=http://otel-collector.observability:4318") &&
      length(kubernetes_service_v1.limiter.spec[0].port) == 1 &&
      length(kubernetes_network_policy_v1.limiter.spec[0].ingress[0].ports) == 1
    )
    error_message = "grpc_port 0 must leave the rate limit service off; hotkey_metrics and otlp_endpoint must reach the args: ${jsonencode(values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].args)}"
  }
  assert {
    condition = (
      length(kubernetes_network_policy_v1.limiter.spec[0].ingress) == 2 &&
      length(kubernetes_network_policy_v1.limiter.spec[0].ingress[0].from) == 1 &&
      kubernetes_network_policy_v1.limiter.spec[0].ingress[0].from[0].namespace_selector[0].match_labels == tomap({ "kubernetes.io/metadata.name" = "quota-us" })
    )
    error_message = "with no API namespaces, only the region's own namespace reaches :8080 (and no Prometheus rule)"
  }
  assert {
    condition     = kubernetes_secret_v1.limiter.data["read-token"] == "" && contains(values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].args, "--shutdown-delay=5s")
    error_message = "defaults: no read tokens (empty value = unset), --shutdown-delay=5s"
  }
  assert {
    condition     = values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].termination_grace_period_seconds > 5 + 20
    error_message = "the default grace period must exceed the default delay + drain"
  }

  # No control plane here; only this region's limiters reach NATS and Redis.
  assert {
    condition     = length(kubernetes_deployment_v1.control_plane) == 0 && length(kubernetes_service_v1.control_plane) == 0 && length(kubernetes_secret_v1.control_plane) == 0 && length(kubernetes_network_policy_v1.control_plane) == 0
    error_message = "the control plane runs in the control region only"
  }
  assert {
    condition = (
      kubernetes_secret_v1.nats.data["limiter-us.limiter-us-1"] == "\"${sha256("quota-nats-process-password\nus\nlimiter-us-1\nTEST-NATS-LIMITER-US-0001")}\"" &&
      !contains(keys(kubernetes_secret_v1.nats.data), "limiter-us") &&
      kubernetes_secret_v1.nats.data["gateway"] == "\"TEST-NATS-GATEWAY-000001\"" &&
      alltrue([for u in ["limiter-eu", "control-plane", "reconciler"] : startswith(kubernetes_secret_v1.nats.data[u], "\"disabled-")]) &&
      !strcontains(jsonencode(kubernetes_secret_v1.nats.data), "TEST-NATS-LIMITER-") &&
      !strcontains(jsonencode(kubernetes_secret_v1.nats.data), "TEST-NATS-CONTROL") &&
      !strcontains(jsonencode(kubernetes_secret_v1.nats.data), "TEST-NATS-RECONCILER")
    )
    error_message = "outside the control and ledger regions, only us's limiter processes and gateway have their real passwords in Secret nats-us"
  }
  assert {
    condition     = strcontains(kubernetes_config_map_v1.nats.data["nats.conf"], "\"quota.usage.eu.>\"") && strcontains(kubernetes_config_map_v1.nats.data["nats.conf"], "user: \"control-plane\"")
    error_message = "every region's config defines the control-plane user with the control region's subjects"
  }
  assert {
    condition     = contains(values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].args, "--usage-stream-replicas=1") && contains(kubernetes_stateful_set_v1.limiter["limiter-us-0"].spec[0].template[0].spec[0].container[0].args, "--nats-user=limiter-us.limiter-us-0")
    error_message = "one NATS server: the limiters create an R1 usage stream"
  }
  assert {
    condition = (
      length(kubernetes_network_policy_v1.nats.spec[0].ingress) == 3 &&
      length(kubernetes_network_policy_v1.nats.spec[0].ingress[0].from) == 1 &&
      [for p in kubernetes_network_policy_v1.nats.spec[0].ingress[2].ports : p.port] == ["7222"] &&
      length(kubernetes_network_policy_v1.nats.spec[0].ingress[2].from) == 1 &&
      kubernetes_network_policy_v1.nats.spec[0].ingress[2].from[0].namespace_selector[0].match_expressions[0].values == toset(["quota-eu"]) &&
      kubernetes_network_policy_v1.nats.spec[0].ingress[2].from[0].pod_selector[0].match_labels == tomap({ "app.kubernetes.io/name" = "nats" }) &&
      kubernetes_network_policy_v1.nats.spec[0].ingress[2].from[0].pod_selector[0].match_expressions[0].values == toset(["eu"])
    )
    error_message = "NATS us: clients = its limiters only; gateways = eu's NATS pods in quota-eu; no monitor rule: ${jsonencode(kubernetes_network_policy_v1.nats.spec[0].ingress)}"
  }
  assert {
    condition     = length(kubernetes_network_policy_v1.redis[0].spec[0].ingress[0].from) == 1
    error_message = "Redis us: its limiters only"
  }
  assert {
    condition     = kubernetes_service_v1.nats_gateway.spec[0].type == "ClusterIP" && length(coalesce(kubernetes_service_v1.nats_gateway.spec[0].load_balancer_source_ranges, [])) == 0
    error_message = "an in-cluster gateway is a ClusterIP Service without source ranges"
  }
}

# NATS TLS from a kubernetes.io/tls Secret: the servers mount all of it and serve TLS to clients
# and on the gateways; the limiters and the control plane get its ca.crt only.
run "region_nats_tls" {
  command = plan

  module {
    source = "./modules/region"
  }

  variables {
    spec = {
      name                   = "eu"
      images                 = { quota = "registry.example.com/quota@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", nats = "nats@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", redis = "redis@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" }
      weights                = { eu = 1 }
      gateway_url            = "nats://gw.eu.example.com:7222"
      peers                  = {}
      gateway_source_ranges  = ["198.51.100.0/24"]
      nats_tls_secret        = "nats-tls"
      usage_stream_max_bytes = 4294967296
    }
    admin_token     = "TEST-ADMIN-TOKEN-0123456789"
    memberlist_keys = ["VEVTVC1NRU1CRVJMSVNULUtFWS1FVS0wMTIzNDU2Nzg="]
    redis_password  = "TEST-REDIS-EU"
    nats_passwords = {
      "limiter-eu"    = "TEST-NATS-LIMITER-EU-0001"
      "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
      "reconciler"    = "TEST-NATS-RECONCILER-0001"
      "gateway"       = "TEST-NATS-GATEWAY-000001"
    }
    check_tokens = ["TEST-CHECK-TOKEN-0001"]
  }

  assert {
    condition = (
      strcontains(kubernetes_config_map_v1.nats.data["nats.conf"], "tls {\n  cert_file: \"/etc/nats-tls/tls.crt\"\n  key_file: \"/etc/nats-tls/tls.key\"\n  ca_file: \"/etc/nats-tls/ca.crt\"\n}") &&
      length(regexall("tls \\{", kubernetes_config_map_v1.nats.data["nats.conf"])) == 2
    )
    error_message = "nats.conf must serve TLS to clients and on the gateway with the mounted Secret:\n${kubernetes_config_map_v1.nats.data["nats.conf"]}"
  }
  assert {
    condition = (
      [for v in kubernetes_stateful_set_v1.nats.spec[0].template[0].spec[0].volume : v.secret[0].secret_name if v.name == "tls"] == ["nats-tls"] &&
      [for m in kubernetes_stateful_set_v1.nats.spec[0].template[0].spec[0].container[0].volume_mount : m.mount_path if m.name == "tls"] == ["/etc/nats-tls"]
    )
    error_message = "the NATS pods must mount Secret nats-tls at /etc/nats-tls"
  }
  assert {
    condition = alltrue([
      for pod in [values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0], kubernetes_deployment_v1.control_plane[0].spec[0].template[0].spec[0]] :
      contains(pod.container[0].args, "--nats-tls-ca=/etc/quota/nats-tls/ca.crt") &&
      [for v in pod.volume : "${v.secret[0].secret_name}:${join(",", [for i in v.secret[0].items : "${i.key}=${i.path}"])}" if v.name == "nats-tls-ca"] == ["nats-tls:ca.crt=ca.crt"] &&
      [for m in pod.container[0].volume_mount : m.mount_path if m.name == "nats-tls-ca"] == ["/etc/quota/nats-tls"]
    ])
    error_message = "the limiters and the control plane must mount only ca.crt of the NATS TLS Secret and pass --nats-tls-ca"
  }
  assert {
    condition     = contains(values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].args, "--usage-stream-max-bytes=4294967296") && contains(kubernetes_deployment_v1.control_plane[0].spec[0].template[0].spec[0].container[0].args, "--usage-stream-max-bytes=4294967296")
    error_message = "--usage-stream-max-bytes must follow spec.usage_stream_max_bytes"
  }
}

run "region_requires_check_tokens" {
  command = plan

  module {
    source = "./modules/region"
  }

  variables {
    spec = {
      name        = "us"
      images      = { quota = "registry.example.com/quota@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", nats = "nats@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", redis = "redis@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" }
      weights     = { us = 1 }
      gateway_url = "nats://gw.us.example.com:7222"
      peers       = {}
      # An exposed gateway would need source ranges (another failure than the one tested).
      gateway_service_type = "ClusterIP"
    }
    admin_token     = "TEST-ADMIN-TOKEN-0123456789"
    memberlist_keys = ["VEVTVC1NRU1CRVJMSVNULUtFWS1FVS0wMTIzNDU2Nzg="]
    redis_password  = "TEST-REDIS-US"
    nats_passwords = {
      "limiter-us"    = "TEST-NATS-LIMITER-US-0001"
      "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
      "reconciler"    = "TEST-NATS-RECONCILER-0001"
      "gateway"       = "TEST-NATS-GATEWAY-000001"
    }
  }

  expect_failures = [var.check_tokens]
}

run "ledger_tokens_network_shutdown" {
  command = plan

  module {
    source = "./modules/ledger"
  }

  variables {
    spec = {
      region        = "eu"
      namespace     = "quota"
      images        = { quota = "registry.example.com/quota@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", postgres = "postgres@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" }
      nats_url      = "nats://nats-eu.quota.svc.cluster.local:4222"
      reconciler    = { shutdown_delay_seconds = 8 }
      postgres      = { development_in_cluster = true }
      otlp_endpoint = "http://otel-collector.observability:4318"
      network = {
        billing_client_namespaces = ["billing", "finance"]
        prometheus_namespace      = "monitoring"
        otlp_namespaces           = ["observability"]
      }
    }
    postgres_password = "TEST-PG-PASSWORD"
    nats_password     = "TEST-NATS-RECONCILER-0001"
    billing_tokens    = ["TEST-BILLING-TOKEN-001", "prefix:acct_=TEST-BILLING-TOKEN-002"]
  }

  assert {
    condition     = contains(kubernetes_deployment_v1.reconciler.spec[0].template[0].spec[0].container[0].args, "--otlp-endpoint=http://otel-collector.observability:4318")
    error_message = "otlp_endpoint must reach the reconciler's --otlp-endpoint"
  }
  assert {
    condition     = kubernetes_secret_v1.ledger.data["billing-token"] == "TEST-BILLING-TOKEN-001,prefix:acct_=TEST-BILLING-TOKEN-002"
    error_message = "the ledger Secret must hold the billing tokens under billing-token"
  }
  assert {
    condition = [
      for e in kubernetes_deployment_v1.reconciler.spec[0].template[0].spec[0].container[0].env :
      "${e.value_from[0].secret_key_ref[0].name}/${e.value_from[0].secret_key_ref[0].key}" if e.name == "QUOTA_BILLING_TOKEN"
    ] == ["${kubernetes_secret_v1.ledger.metadata[0].name}/billing-token"]
    error_message = "QUOTA_BILLING_TOKEN must come from the ledger Secret by secretKeyRef"
  }
  assert {
    condition     = !anytrue([for a in kubernetes_deployment_v1.reconciler.spec[0].template[0].spec[0].container[0].args : strcontains(a, "TEST-") || startswith(a, "--billing-token")])
    error_message = "a token is in the reconciler arguments"
  }
  assert {
    condition = (
      contains(kubernetes_deployment_v1.reconciler.spec[0].template[0].spec[0].container[0].args, "--shutdown-delay=8s") &&
      kubernetes_deployment_v1.reconciler.spec[0].template[0].spec[0].termination_grace_period_seconds > 8 + 30 &&
      kubernetes_deployment_v1.reconciler.spec[0].template[0].spec[0].container[0].readiness_probe[0].http_get[0].path == "/readyz" &&
      length(kubernetes_deployment_v1.reconciler.spec[0].template[0].spec[0].container[0].lifecycle) == 0
    )
    error_message = "reconciler: explicit --shutdown-delay, grace > delay + drain, /readyz readiness, no preStop"
  }
  assert {
    condition = (
      kubernetes_network_policy_v1.reconciler.spec[0].policy_types == tolist(["Ingress", "Egress"]) &&
      length(kubernetes_network_policy_v1.reconciler.spec[0].ingress) == 1 &&
      kubernetes_network_policy_v1.reconciler.spec[0].ingress[0].ports[0].port == "8081" &&
      kubernetes_network_policy_v1.reconciler.spec[0].ingress[0].from[0].namespace_selector[0].match_expressions[0].values == toset(["billing", "finance", "monitoring"])
    )
    error_message = "the reconciler's :8081 must admit the billing namespaces and Prometheus' only: ${jsonencode(kubernetes_network_policy_v1.reconciler.spec[0].ingress)}"
  }

  # NATS: user reconciler, password from the ledger Secret, stream flags (defaults: R1, 1 GiB).
  assert {
    condition = (
      alltrue([for a in ["--nats-user=reconciler", "--stream-replicas=1", "--stream-max-bytes=1073741824"] : contains(kubernetes_deployment_v1.reconciler.spec[0].template[0].spec[0].container[0].args, a)]) &&
      !anytrue([for a in kubernetes_deployment_v1.reconciler.spec[0].template[0].spec[0].container[0].args : startswith(a, "--nats-password") || startswith(a, "--nats-tls")])
    )
    error_message = "reconciler args: ${jsonencode(kubernetes_deployment_v1.reconciler.spec[0].template[0].spec[0].container[0].args)}"
  }
  assert {
    condition = [
      for e in kubernetes_deployment_v1.reconciler.spec[0].template[0].spec[0].container[0].env :
      "${e.value_from[0].secret_key_ref[0].name}/${e.value_from[0].secret_key_ref[0].key}" if e.name == "QUOTA_NATS_PASSWORD"
    ] == ["quota-ledger-eu/nats-password"] && kubernetes_secret_v1.ledger.data["nats-password"] == "TEST-NATS-RECONCILER-0001"
    error_message = "QUOTA_NATS_PASSWORD of the reconciler must come from the ledger Secret, which holds the reconciler's NATS password"
  }
  # Postgres (in-cluster): the reconciler only.
  assert {
    condition = (
      length(kubernetes_network_policy_v1.postgres) == 1 &&
      [for p in kubernetes_network_policy_v1.postgres[0].spec[0].ingress[0].ports : p.port] == ["5432"] &&
      length(kubernetes_network_policy_v1.postgres[0].spec[0].ingress[0].from) == 1 &&
      kubernetes_network_policy_v1.postgres[0].spec[0].ingress[0].from[0].pod_selector[0].match_labels == tomap({ "app.kubernetes.io/name" = "reconciler", "quota.dev/region" = "eu" })
    )
    error_message = "Postgres :5432 must admit the reconciler only"
  }
}

run "ledger_closed_by_default" {
  command = plan

  module {
    source = "./modules/ledger"
  }

  variables {
    spec = {
      region          = "eu"
      namespace       = "quota"
      images          = { quota = "registry.example.com/quota@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" }
      nats_url        = "nats://nats-eu.quota.svc.cluster.local:4222"
      nats_tls_secret = "nats-tls"
      usage_stream    = { replicas = 3, max_bytes = 2147483648 }
      postgres        = { host = "ledger.example.internal", cidrs = ["10.30.0.0/16"] }
    }
    postgres_password = "TEST-PG-PASSWORD"
    nats_password     = "TEST-NATS-RECONCILER-0001"
  }

  assert {
    condition = (
      alltrue([for a in ["--stream-replicas=3", "--stream-max-bytes=2147483648", "--nats-tls-ca=/etc/quota/nats-tls/ca.crt"] : contains(kubernetes_deployment_v1.reconciler.spec[0].template[0].spec[0].container[0].args, a)]) &&
      [for v in kubernetes_deployment_v1.reconciler.spec[0].template[0].spec[0].volume : "${v.secret[0].secret_name}:${join(",", [for i in v.secret[0].items : i.key])}" if v.name == "nats-tls-ca"] == ["nats-tls:ca.crt"]
    )
    error_message = "reconciler: stream flags from spec.usage_stream, and the CA of the NATS TLS Secret only: ${jsonencode(kubernetes_deployment_v1.reconciler.spec[0].template[0].spec[0].container[0].args)}"
  }
  assert {
    condition     = length(kubernetes_network_policy_v1.postgres) == 0
    error_message = "a managed Postgres gets no NetworkPolicy"
  }

  assert {
    condition     = length(kubernetes_network_policy_v1.reconciler.spec[0].ingress) == 0 && kubernetes_secret_v1.ledger.data["billing-token"] == ""
    error_message = "no billing namespaces and no Prometheus: no ingress to the reconciler; no billing tokens: empty value (billing API off)"
  }
}
