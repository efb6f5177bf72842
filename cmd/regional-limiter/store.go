package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"

	"github.com/quotaplatform/quota/region"
)

// newStore is the region's store: in process when --redis is empty, else a
// go-redis client (or cluster client) with context timeouts enabled, so the
// limiter's hard store timeout also bounds the socket.
func newStore(lc fx.Lifecycle, o Options, log *slog.Logger) (region.Store, error) {
	if o.Redis == "" {
		log.Info("using the in-process store (--redis is empty): limits hold for this process only")
		return region.NewMemoryStore(nil), nil
	}
	var rdb redis.UniversalClient
	if o.RedisCluster {
		var co redis.ClusterOptions
		for i, u := range strings.Split(o.Redis, ",") {
			ro, err := redis.ParseURL(strings.TrimSpace(u))
			if err != nil {
				return nil, fmt.Errorf("--redis: seed %d: %w", i, err)
			}
			co.Addrs = append(co.Addrs, ro.Addr)
			if i == 0 {
				co.Username, co.Password, co.TLSConfig = ro.Username, ro.Password, ro.TLSConfig
			}
		}
		co.ContextTimeoutEnabled = true
		co.ClientName = "regional-limiter-" + o.ProcessID
		rdb = redis.NewClusterClient(&co)
	} else {
		ro, err := redis.ParseURL(o.Redis)
		if err != nil {
			return nil, fmt.Errorf("--redis: %w", err)
		}
		ro.ContextTimeoutEnabled = true
		ro.ClientName = "regional-limiter-" + o.ProcessID
		rdb = redis.NewClient(ro)
	}
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			// A Redis that is down at start is not fatal: the limiter
			// degrades until it answers. Say so once.
			if err := rdb.Ping(ctx).Err(); err != nil {
				log.Warn("redis not reachable at start; decisions degrade until it is", "err", err)
			}
			return nil
		},
		OnStop: func(context.Context) error { return rdb.Close() },
	})
	return region.NewRedisStore(rdb, ""), nil
}
