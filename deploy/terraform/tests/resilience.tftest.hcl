# Disruption, placement, state and rollouts (issue 19, items 3 to 5), planned on modules/region
# and modules/ledger against a mocked kubernetes provider: PodDisruptionBudgets, required
# anti-affinity and spread by zone, Guaranteed QoS and GOMEMLIMIT, the in-cluster Redis' AOF on
# a volume with its password out of argv, the catalogue cache on a per-pod volume, checksum
# annotations, NATS as non-root with lame duck on stop and a JetStream startup probe, and an
# external Postgres verified with verify-full. deploy/README.md describes each.

mock_provider "kubernetes" {}

run "zoned_region" {
  command = plan

  module {
    source = "./modules/region"
  }

  variables {
    spec = {
      name        = "eu"
      images      = { quota = "registry.example.com/quota@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", nats = "nats@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", redis = "redis@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" }
      weights     = { eu = 0.6, us = 0.4 }
      gateway_url = "nats://gw.eu.example.com:7222"
      peers       = { us = "nats://gw.us.example.com:7222" }
      zones       = ["eu-west-1a", "eu-west-1b", "eu-west-1c"]
      jetstream   = { cluster = "eu", replicas = 3 }
      limiter     = { memory_limit = "1Gi", cpu_limit = "2", shutdown_delay_seconds = 5, drain_seconds = 20 }
      nats        = { lame_duck_seconds = 30 }
      # In-cluster Redis (endpoint null).
      reconciler_namespace  = "quota-eu"
      gateway_source_ranges = ["198.51.100.0/24"]
      nats_tls_secret       = "nats-tls"
    }
    admin_token     = "TEST-ADMIN-TOKEN-0123456789"
    memberlist_keys = ["VEVTVC1NRU1CRVJMSVNULUtFWS1FVS0wMTIzNDU2Nzg="]
    redis_password  = "TEST-REDIS-EU-\"quoted\""
    nats_passwords = {
      "limiter-eu"    = "TEST-NATS-LIMITER-EU-0001"
      "limiter-us"    = "TEST-NATS-LIMITER-US-0001"
      "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
      "reconciler"    = "TEST-NATS-RECONCILER-0001"
      "gateway"       = "TEST-NATS-GATEWAY-000001"
    }
    check_tokens = ["TEST-CHECK-TOKEN-0001"]
  }

  # Item 3: PodDisruptionBudgets (policy/v1) for limiters, NATS and the in-cluster Redis, each
  # selecting exactly its own pods.
  assert {
    condition = (
      kubernetes_pod_disruption_budget_v1.limiter.spec[0].min_available == tostring(length(kubernetes_stateful_set_v1.limiter) - 1) &&
      kubernetes_pod_disruption_budget_v1.limiter.spec[0].selector[0].match_labels == tomap({ "app.kubernetes.io/name" = "regional-limiter", "quota.dev/region" = "eu" }) &&
      alltrue([for s in kubernetes_stateful_set_v1.limiter : s.spec[0].selector[0].match_labels == tomap(merge(kubernetes_pod_disruption_budget_v1.limiter.spec[0].selector[0].match_labels, { "quota.dev/process" = s.metadata[0].name }))]) &&
      kubernetes_pod_disruption_budget_v1.nats.spec[0].max_unavailable == "1" &&
      kubernetes_pod_disruption_budget_v1.nats.spec[0].selector[0].match_labels == kubernetes_stateful_set_v1.nats.spec[0].selector[0].match_labels &&
      length(kubernetes_pod_disruption_budget_v1.redis) == 1 &&
      kubernetes_pod_disruption_budget_v1.redis[0].spec[0].max_unavailable == "0" &&
      kubernetes_pod_disruption_budget_v1.redis[0].spec[0].selector[0].match_labels == kubernetes_stateful_set_v1.redis[0].spec[0].selector[0].match_labels
    )
    error_message = "PDBs: limiters (all of the region's processes) and NATS one at a time, the single Redis not evictable by default, each selecting its own pods"
  }

  # Item 3: with zones, the NATS servers are required apart by zone (and by node), and kept in
  # the listed zones; the limiters are spread over the zones with DoNotSchedule.
  assert {
    condition = (
      toset([for t in kubernetes_stateful_set_v1.nats.spec[0].template[0].spec[0].affinity[0].pod_anti_affinity[0].required_during_scheduling_ignored_during_execution : t.topology_key]) == toset(["topology.kubernetes.io/zone", "kubernetes.io/hostname"]) &&
      alltrue([for t in kubernetes_stateful_set_v1.nats.spec[0].template[0].spec[0].affinity[0].pod_anti_affinity[0].required_during_scheduling_ignored_during_execution : t.label_selector[0].match_labels == kubernetes_stateful_set_v1.nats.spec[0].selector[0].match_labels]) &&
      tolist(kubernetes_stateful_set_v1.nats.spec[0].template[0].spec[0].affinity[0].node_affinity[0].required_during_scheduling_ignored_during_execution[0].node_selector_term[0].match_expressions[0].values) == tolist(["eu-west-1a", "eu-west-1b", "eu-west-1c"])
    )
    error_message = "NATS: required anti-affinity by zone and by node, and node affinity to the listed zones"
  }
  assert {
    condition = anytrue([for c in values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].topology_spread_constraint :
      c.topology_key == "topology.kubernetes.io/zone" && c.when_unsatisfiable == "DoNotSchedule" && c.max_skew == 1 &&
      c.label_selector[0].match_labels == kubernetes_pod_disruption_budget_v1.limiter.spec[0].selector[0].match_labels
    ])
    error_message = "limiters: all of the region's processes spread over the zones, maxSkew 1, DoNotSchedule"
  }

  # Item 3: Guaranteed QoS by default (requests = limits, whole CPUs), GOMEMLIMIT 90 % of the
  # memory limit (1Gi -> 966367641 bytes).
  assert {
    condition = (
      values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].resources[0].requests == values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].resources[0].limits &&
      values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].resources[0].limits["cpu"] == "2" &&
      values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].resources[0].limits["memory"] == "1Gi"
    )
    error_message = "limiter: Guaranteed QoS needs requests equal to limits: ${jsonencode(values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].resources)}"
  }
  assert {
    condition     = one([for e in values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].env : e.value if e.name == "GOMEMLIMIT"]) == "966367641"
    error_message = "limiter: GOMEMLIMIT must be 90 % of the 1Gi memory limit (966367641)"
  }

  # Item 4: the in-cluster Redis appends to an AOF in /data, a PersistentVolumeClaim; no eviction
  # of keys (memory exhaustion is a loud error: degraded mode, not over-admission).
  assert {
    condition = (
      strcontains(kubernetes_secret_v1.redis[0].data["redis.conf"], "\nappendonly yes\n") &&
      strcontains(kubernetes_secret_v1.redis[0].data["redis.conf"], "\ndir /data\n") &&
      strcontains(kubernetes_secret_v1.redis[0].data["redis.conf"], "\nmaxmemory-policy noeviction\n") &&
      kubernetes_stateful_set_v1.redis[0].spec[0].volume_claim_template[0].metadata[0].name == "data" &&
      anytrue([for m in kubernetes_stateful_set_v1.redis[0].spec[0].template[0].spec[0].container[0].volume_mount : m.name == "data" && m.mount_path == "/data"])
    )
    error_message = "Redis: AOF on (appendonly yes, dir /data) with /data on the StatefulSet's volume claim, noeviction"
  }

  # Item 5: the Redis password is in its config file (a Secret volume), quoted, never in argv;
  # the probes need no password (no redis-cli -a).
  assert {
    condition = (
      kubernetes_stateful_set_v1.redis[0].spec[0].template[0].spec[0].container[0].args == tolist(["/etc/redis/redis.conf"]) &&
      !strcontains(jsonencode(kubernetes_stateful_set_v1.redis[0].spec[0].template[0].spec[0].container[0].command), "TEST-") &&
      strcontains(kubernetes_secret_v1.redis[0].data["redis.conf"], "\nrequirepass \"TEST-REDIS-EU-\\\"quoted\\\"\"\n") &&
      length(kubernetes_stateful_set_v1.redis[0].spec[0].template[0].spec[0].container[0].readiness_probe[0].exec) == 0 &&
      length(kubernetes_stateful_set_v1.redis[0].spec[0].template[0].spec[0].container[0].liveness_probe[0].exec) == 0
    )
    error_message = "Redis: the password must be in redis.conf (escaped and quoted), not in command, args or a probe"
  }

  # Item 5: checksum annotations, each the hash of exactly what the pods read at start: a change
  # of the Secret or the config changes the pod template and rolls the pods.
  assert {
    condition = (
      alltrue([for p, s in kubernetes_stateful_set_v1.limiter : s.spec[0].template[0].metadata[0].annotations["quota.dev/secret-hash"] == sha256(jsonencode([kubernetes_secret_v1.limiter.data, kubernetes_secret_v1.limiter_nats[p].data]))]) &&
      kubernetes_stateful_set_v1.nats.spec[0].template[0].metadata[0].annotations["quota.dev/config-hash"] == sha256(kubernetes_config_map_v1.nats.data["nats.conf"]) &&
      kubernetes_stateful_set_v1.nats.spec[0].template[0].metadata[0].annotations["quota.dev/secret-hash"] == sha256(jsonencode(kubernetes_secret_v1.nats.data)) &&
      kubernetes_stateful_set_v1.redis[0].spec[0].template[0].metadata[0].annotations["quota.dev/config-hash"] == sha256(kubernetes_secret_v1.redis[0].data["redis.conf"]) &&
      kubernetes_deployment_v1.control_plane[0].spec[0].template[0].metadata[0].annotations["quota.dev/secret-hash"] == sha256(jsonencode(kubernetes_secret_v1.control_plane[0].data))
    )
    error_message = "every pod template must carry the hash of the Secret / config it reads"
  }

  # Item 5: terminationGracePeriodSeconds above the daemon's drain (--shutdown-delay + drain).
  assert {
    condition = (
      contains(values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].args, "--shutdown-delay=5s") &&
      values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].termination_grace_period_seconds > 5 + 20 &&
      kubernetes_deployment_v1.control_plane[0].spec[0].template[0].spec[0].termination_grace_period_seconds > 5 + 20
    )
    error_message = "limiter and control plane: grace period must exceed --shutdown-delay plus the drain"
  }

  # Item 5: NATS runs as non-root, enters lame duck on stop (preStop signal ldm through the pid
  # file the config writes), has the time to finish it, and is started only when JetStream is.
  assert {
    condition = (
      kubernetes_stateful_set_v1.nats.spec[0].template[0].spec[0].security_context[0].run_as_non_root &&
      tonumber(kubernetes_stateful_set_v1.nats.spec[0].template[0].spec[0].security_context[0].run_as_user) > 0 &&
      !kubernetes_stateful_set_v1.nats.spec[0].template[0].spec[0].container[0].security_context[0].allow_privilege_escalation
    )
    error_message = "NATS must run as a non-root user without privilege escalation"
  }
  assert {
    condition = (
      kubernetes_stateful_set_v1.nats.spec[0].template[0].spec[0].container[0].lifecycle[0].pre_stop[0].exec[0].command == tolist(["nats-server", "--signal", "ldm=/var/run/nats/nats.pid"]) &&
      strcontains(kubernetes_config_map_v1.nats.data["nats.conf"], "pid_file: \"/var/run/nats/nats.pid\"") &&
      strcontains(kubernetes_config_map_v1.nats.data["nats.conf"], "lame_duck_duration: \"30s\"") &&
      kubernetes_stateful_set_v1.nats.spec[0].template[0].spec[0].termination_grace_period_seconds > 30 + 10
    )
    error_message = "NATS: preStop must signal lame duck through the config's pid file, and the grace period cover the lame-duck duration"
  }
  assert {
    condition = (
      startswith(kubernetes_stateful_set_v1.nats.spec[0].template[0].spec[0].container[0].startup_probe[0].http_get[0].path, "/healthz") &&
      kubernetes_stateful_set_v1.nats.spec[0].template[0].spec[0].container[0].startup_probe[0].http_get[0].port == "8222" &&
      strcontains(kubernetes_stateful_set_v1.nats.spec[0].template[0].spec[0].container[0].liveness_probe[0].http_get[0].path, "js-enabled-only=true")
    )
    error_message = "NATS: a startup probe on the JetStream health endpoint (:8222/healthz), liveness on js-enabled-only"
  }

  # Item 5: the catalogue cache survives a pod restart: --data-dir is the pod's own volume claim,
  # and readiness is /readyz (a cached catalogue suffices, NATS is not needed).
  assert {
    condition = (
      contains(values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].args, "--data-dir=/var/lib/quota") &&
      values(kubernetes_stateful_set_v1.limiter)[0].spec[0].volume_claim_template[0].metadata[0].name == "data" &&
      anytrue([for m in values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].volume_mount : m.name == "data" && m.mount_path == "/var/lib/quota"]) &&
      values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].readiness_probe[0].http_get[0].path == "/readyz"
    )
    error_message = "limiter: --data-dir (catalogue cache, spool) must be on the pod's volume claim, readiness /readyz"
  }

  # Item 1's deploy side: every process that may create the usage stream or the catalogue
  # bucket places it R3 in the ledger region's cluster.
  assert {
    condition = alltrue([for a in ["--usage-stream-replicas=3", "--usage-stream-cluster=eu", "--catalog-replicas=3", "--catalog-cluster=eu"] :
      contains(values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].args, a) &&
      contains(kubernetes_deployment_v1.control_plane[0].spec[0].template[0].spec[0].container[0].args, a)
    ])
    error_message = "limiters and control plane: R3 usage stream and catalogue bucket placed in eu"
  }
}

run "unzoned_burstable_managed_redis" {
  command = plan

  module {
    source = "./modules/region"
  }

  variables {
    spec = {
      name        = "us"
      images      = { quota = "registry.example.com/quota@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", nats = "nats@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" }
      weights     = { eu = 0.6, us = 0.4 }
      gateway_url = "nats://gw.us.example.com:7222"
      peers       = { eu = "nats://gw.eu.example.com:7222" }
      limiter     = { qos = "Burstable", cpu_request = "250m", memory_request = "128Mi", memory_limit = "512Mi" }
      redis       = { endpoint = "us.cache.example.com:6379", cidrs = ["10.20.0.0/16"], tls = true }
      # The control plane runs in eu.
      control_region        = "eu"
      gateway_source_ranges = ["198.51.100.0/24"]
      nats_tls_secret       = "nats-tls"
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

  # No zones: NATS servers required apart by node only, limiters not spread by zone.
  assert {
    condition = (
      [for t in kubernetes_stateful_set_v1.nats.spec[0].template[0].spec[0].affinity[0].pod_anti_affinity[0].required_during_scheduling_ignored_during_execution : t.topology_key] == ["kubernetes.io/hostname"] &&
      length(kubernetes_stateful_set_v1.nats.spec[0].template[0].spec[0].affinity[0].node_affinity) == 0 &&
      !anytrue([for c in values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].topology_spread_constraint : c.topology_key == "topology.kubernetes.io/zone"])
    )
    error_message = "without zones: NATS anti-affinity by node only, no zone spread or zone affinity"
  }
  # Burstable: the requests given, GOMEMLIMIT still from the limit (512Mi -> 483183820).
  assert {
    condition = (
      values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].resources[0].requests == tomap({ cpu = "250m", memory = "128Mi" }) &&
      one([for e in values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].env : e.value if e.name == "GOMEMLIMIT"]) == "483183820"
    )
    error_message = "Burstable: requests as given, GOMEMLIMIT 90 % of 512Mi"
  }
  # A managed Redis: no StatefulSet, no PDB of ours; its URL (with the password) only in the Secret.
  assert {
    condition = (
      length(kubernetes_stateful_set_v1.redis) == 0 && length(kubernetes_pod_disruption_budget_v1.redis) == 0 &&
      startswith(kubernetes_secret_v1.limiter.data["redis-url"], "rediss://:") &&
      endswith(kubernetes_secret_v1.limiter.data["redis-url"], "@us.cache.example.com:6379/0")
    )
    error_message = "managed Redis: no in-cluster Redis objects; the rediss:// URL in the limiter Secret"
  }
}

# Item 4: the production ledger is an external Postgres, verified with sslmode verify-full
# against the CA in ca_secret (sslrootcert), by default.
run "ledger_external_postgres_verify_full" {
  command = plan

  module {
    source = "./modules/ledger"
  }

  variables {
    spec = {
      region    = "eu"
      namespace = "quota-eu"
      images    = { quota = "registry.example.com/quota@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" }
      nats_url  = "nats://nats-eu.quota-eu.svc.cluster.local:4222"
      postgres  = { host = "ledger.abc.eu-west-1.rds.amazonaws.com", cidrs = ["10.30.0.0/16"], ca_secret = "rds-ca" }
    }
    postgres_password = "TEST-PG-PASSWORD"
    nats_password     = "TEST-NATS-RECONCILER-0001"
  }

  assert {
    condition = (
      strcontains(kubernetes_secret_v1.ledger.data["postgres-url"], "@ledger.abc.eu-west-1.rds.amazonaws.com:5432/quota?sslmode=verify-full&sslrootcert=/etc/quota/postgres-ca/ca.crt") &&
      anytrue([for v in kubernetes_deployment_v1.reconciler.spec[0].template[0].spec[0].volume : v.name == "postgres-ca" && v.secret[0].secret_name == "rds-ca"]) &&
      anytrue([for m in kubernetes_deployment_v1.reconciler.spec[0].template[0].spec[0].container[0].volume_mount : m.name == "postgres-ca" && m.mount_path == "/etc/quota/postgres-ca"]) &&
      length(kubernetes_stateful_set_v1.postgres) == 0
    )
    error_message = "external Postgres: sslmode=verify-full with the CA Secret mounted as sslrootcert, and no in-cluster Postgres"
  }
  # The reconciler: GOMEMLIMIT from its limit, the Secret's hash on its pods.
  assert {
    condition = (
      one([for e in kubernetes_deployment_v1.reconciler.spec[0].template[0].spec[0].container[0].env : e.value if e.name == "GOMEMLIMIT"]) == "966367641" &&
      kubernetes_deployment_v1.reconciler.spec[0].template[0].metadata[0].annotations["quota.dev/secret-hash"] == sha256(jsonencode(kubernetes_secret_v1.ledger.data))
    )
    error_message = "reconciler: GOMEMLIMIT 90 % of 1Gi, secret-hash annotation"
  }
}
