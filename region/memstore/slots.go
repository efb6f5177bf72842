package memstore

import (
	"context"
	"hash/maphash"
	"time"

	"github.com/quotaplatform/quota/region/store"
)

var _ store.SlotStore = (*Store)(nil)

// AcquireSlot implements store.SlotStore.
func (s *Store) AcquireSlot(ctx context.Context, req store.SlotRequest) (store.SlotReply, error) {
	if err := req.Validate(); err != nil {
		return store.SlotReply{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.SlotReply{}, err
	}
	now := s.clock.Now()
	sh := s.slotShard(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	held := sh.liveLocked(req.Key, now)
	if _, ok := held[req.ID]; !ok && len(held) >= req.Limit {
		return store.SlotReply{Held: len(held)}, nil
	}
	if held == nil {
		if sh.slots == nil {
			sh.slots = make(map[string]map[string]time.Time)
		}
		held = make(map[string]time.Time)
		sh.slots[req.Key] = held
	}
	held[req.ID] = now.Add(req.TTL)
	return store.SlotReply{Acquired: true, Held: len(held), TTL: req.TTL}, nil
}

// ReleaseSlot implements store.SlotStore.
func (s *Store) ReleaseSlot(ctx context.Context, key, id string) (bool, error) {
	if err := (store.SlotRequest{Key: key, ID: id, Limit: 1, TTL: time.Millisecond}).Validate(); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	sh := s.slotShard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	held := sh.liveLocked(key, s.clock.Now())
	if _, ok := held[id]; !ok {
		return false, nil
	}
	delete(held, id)
	if len(held) == 0 {
		delete(sh.slots, key)
	}
	return true, nil
}

func (s *Store) slotShard(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)%shardCount]
}

// liveLocked returns key's slots with the expired ones dropped (nil when
// none is held).
func (sh *shard) liveLocked(key string, now time.Time) map[string]time.Time {
	held := sh.slots[key]
	for id, exp := range held {
		if !now.Before(exp) {
			delete(held, id)
		}
	}
	if held != nil && len(held) == 0 {
		delete(sh.slots, key)
		return nil
	}
	return held
}
