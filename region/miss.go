package region

// miss is one decision on the slow path: the key, its cost, and what was
// resolved for it before its stripe was taken.
type miss struct {
	key   string
	cost  int64
	plan  Plan        // the key's plan, as the PlanResolver gave it
	share float64     // the region's share of the key, in (0, 1]
	procs int         // the processes sharing the region's store
	epoch uint32      // Limiter.epoch when the plan was resolved
	sh    *shard      // the key's shard
	e     *entry      // the key's entry; set by attachLocked
	q     *quotaState // the key's quota state when its plan has quotas; set by attachLocked
}

// rate and capacity are the region's bucket: the plan scaled by the share.
func (m *miss) rate() float64 { return m.plan.Rate * m.share }

func (m *miss) capacity() float64 { return m.plan.Capacity * m.share }

// newMiss resolves key's plan, share and process count.
func (ls *leases) newMiss(key string, h uint64, cost int64) (miss, error) {
	plan, err := ls.l.plans.resolve(key)
	if err != nil {
		return miss{}, err
	}
	if limit := int64(plan.Capacity); cost > limit {
		return miss{}, costError(cost, limit)
	}
	return miss{
		key:   key,
		cost:  cost,
		plan:  plan,
		share: ls.share(key),
		procs: ls.processes(),
		epoch: ls.l.epoch.Load(),
		sh:    ls.l.shardOf(h),
	}, nil
}

// attachLocked finds or inserts the key's entry, gives it the quota state
// its plan needs, and gives it the resolved plan. It reports whether the
// entry's plan or epoch changed, which ended its lease. The decision rolls
// the entry's window (decideMissLocked). The entry and its quota state
// stay the key's until the shard is unlocked without marking the entry
// busy (evictLocked passes over busy entries).
func (ls *leases) attachLocked(m *miss) (invalidated bool) {
	e := m.sh.keys[m.key]
	if e == nil {
		e = m.sh.insertLocked(m.key, ls.l.cfg.Window)
	}
	m.e = e
	m.q = attachQuotaLocked(m.sh, m.key, e, m.plan.HasQuotas())
	ref := e.plan
	if ref == nil || ref.Plan != m.plan {
		ref = ls.l.plans.shared(m.plan)
	}
	return e.setPlan(ref, m.share, m.epoch)
}

func (ls *leases) share(key string) float64 {
	if ls.l.cfg.Shares == nil {
		return 1
	}
	s := ls.l.cfg.Shares.Share(key)
	if !(s > 0) || s > 1 { // NaN, zero, negative or above one: not a share
		return 1
	}
	return s
}

func (ls *leases) processes() int {
	if ls.l.cfg.Processes != nil {
		if n := ls.l.cfg.Processes.Processes(); n >= 1 {
			return n
		}
	}
	return ls.l.cfg.ProcessEstimate
}
