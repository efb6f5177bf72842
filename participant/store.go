package participant

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaplatform/quota/region/memstore"
	"github.com/quotaplatform/quota/region/redisstore"
	"github.com/quotaplatform/quota/region/store"
)

// regionStore is the participant's store and, when it dialed Redis, the
// client it pings at start and closes at the end.
type regionStore struct {
	store store.Store
	rdb   redis.UniversalClient // nil: Options.Store, or in process
}

// openStore is the region's store: Options.Store, in process when Redis is
// empty, else a go-redis client (or cluster client) with context timeouts
// enabled, so that the limiter's hard store timeout also bounds the socket.
// It does not dial: go-redis connects on first use.
func openStore(o *Options, log *slog.Logger) (*regionStore, error) {
	switch {
	case o.Store != nil:
		return &regionStore{store: o.Store}, nil
	case o.Redis == "":
		log.Info("using the in-process store (no Redis given): limits hold for this process only")
		return &regionStore{store: memstore.New(nil)}, nil
	}
	// go-redis's own lines (dial failures while Redis is down) go to the
	// JSON log, one a second, not to stderr in plain text.
	redis.SetLogger(redisstore.NewLogger(log, time.Second, nil))
	var rdb redis.UniversalClient
	if o.RedisCluster {
		var co redis.ClusterOptions
		for i, u := range strings.Split(o.Redis, ",") {
			ro, err := redis.ParseURL(strings.TrimSpace(u))
			if err != nil {
				return nil, fmt.Errorf("participant: Redis: seed %d: %w", i, err)
			}
			co.Addrs = append(co.Addrs, ro.Addr)
			if i == 0 {
				co.Username, co.Password, co.TLSConfig = ro.Username, ro.Password, ro.TLSConfig
			}
		}
		co.ContextTimeoutEnabled = true
		co.ClientName = o.Name + "-" + o.ProcessID
		rdb = redis.NewClusterClient(&co)
	} else {
		ro, err := redis.ParseURL(o.Redis)
		if err != nil {
			return nil, fmt.Errorf("participant: Redis: %w", err)
		}
		ro.ContextTimeoutEnabled = true
		ro.ClientName = o.Name + "-" + o.ProcessID
		rdb = redis.NewClient(ro)
	}
	return &regionStore{store: redisstore.New(rdb, ""), rdb: rdb}, nil
}

// ping tells the operator once when Redis is down at start, which is not
// fatal: the limiter decides in degraded mode until it answers.
func (s *regionStore) ping(ctx context.Context, log *slog.Logger) {
	if s.rdb == nil {
		return
	}
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		log.Warn("redis not reachable at start; decisions degrade until it is", "err", err)
	}
}

func (s *regionStore) close() error {
	if s.rdb == nil {
		return nil
	}
	return s.rdb.Close()
}
