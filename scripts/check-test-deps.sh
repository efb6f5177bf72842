#!/usr/bin/env bash
# Checks that every server the tests start or use is here, and names the
# Debian package to install when one is missing. Used by `make test`.
set -euo pipefail

missing=()
need() { # binary, debian package
  if ! command -v "$1" >/dev/null 2>&1; then
    missing+=("$1 (Debian package $2)")
  fi
}
need redis-server redis-server
need nats-server nats-server
need promtool prometheus # the dashboard and alert-rule tests (deploy/grafana)
need prometheus prometheus # the harness's Prometheus (test/multiregion TestPrometheusScrapesAndQueries, TestScenarios)
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
  missing+=("initdb/pg_ctl (Debian package postgresql)")
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "make test: missing server binaries:" >&2
  for m in "${missing[@]}"; do echo "  - $m" >&2; done
  echo "install them with: apt-get install -y redis-server nats-server postgresql prometheus (or run .ci/run, which does)" >&2
  exit 1
fi

pg="${QUOTA_TEST_POSTGRES:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}"
if command -v pg_isready >/dev/null 2>&1; then
  if ! pg_isready -q -d "$pg"; then
    echo "make test: Postgres is not accepting connections at $pg (Debian package postgresql; start it with: pg_ctlcluster \$(ls /etc/postgresql) main start)" >&2
    exit 1
  fi
fi
