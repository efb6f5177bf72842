// Package limitmetrics exports a region.Limiter and its catalogue as
// Prometheus metrics: an Observer for the limiter's slow-path events (store
// calls, latency, lease sizes, breaker transitions) and a Collector that
// reads Limiter.Stats and the catalogue version at scrape time.
//
// Metric names (all prefixed quota_):
//
//	quota_decisions_total{result="allowed|rejected|shadow_rejected"}  counter
//	quota_plan_decisions_total{plan,failure_policy,result="degraded_allowed|degraded_rejected|shadow_rejected"}  counter
//	quota_degraded_decisions_total                       counter
//	quota_degraded                                       gauge, 1 while the breaker is not closed
//	quota_breaker_state                                  gauge, 0 closed, 1 open, 2 half-open
//	quota_breaker_transitions_total{state}               counter
//	quota_store_calls_total{result="ok|error"}           counter
//	quota_store_call_duration_seconds                    histogram
//	quota_lease_granted_permits                          histogram, permits per lease (returns excluded)
//	quota_outstanding_permits                            gauge
//	quota_tracked_keys                                   gauge
//	quota_processes                                      gauge
//	quota_clock_offset_seconds                           gauge, store clock minus local clock
//	quota_config_version                                 gauge, catalogue bucket revision
//	quota_config_synced                                  gauge, 1 once the catalogue was read from NATS
//	quota_http_requests_total{route,code}                counter (HTTP, see NewHTTP)
//	quota_http_request_duration_seconds{route}           histogram (HTTP)
//
// Observer methods are cheap and safe for concurrent use; the Collector
// takes the limiter's shard locks once per scrape.
package limitmetrics
