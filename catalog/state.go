package catalog

// state is one copy of the catalogue: the entries of each kind by name.
// It is not safe for concurrent use; the Catalog guards its copy with mu.
type state struct {
	plans map[string]Entry
	keys  map[string]Entry
	costs map[string]Entry
	rls   map[string]Entry // rate limit service domains
}

func newState() *state {
	return &state{plans: map[string]Entry{}, keys: map[string]Entry{}, costs: map[string]Entry{}, rls: map[string]Entry{}}
}

func (s *state) table(k Kind) map[string]Entry {
	switch k {
	case KindPlan:
		return s.plans
	case KindKey:
		return s.keys
	case KindCost:
		return s.costs
	case KindRLS:
		return s.rls
	}
	return nil
}

// put stores e unless the table holds a later revision of it.
func (s *state) put(e Entry) {
	t := s.table(e.Kind)
	if old, ok := t[e.Name]; ok && old.Revision > e.Revision && e.Revision != 0 {
		return
	}
	t[e.Name] = e
}

// remove deletes kind/name unless the table holds a later revision.
func (s *state) remove(k Kind, name string, rev uint64) {
	t := s.table(k)
	if old, ok := t[name]; ok && old.Revision > rev {
		return
	}
	delete(t, name)
}

// entries lists every entry, for the cache file.
func (s *state) entries() []Entry {
	out := make([]Entry, 0, s.len())
	for _, t := range []map[string]Entry{s.plans, s.keys, s.costs, s.rls} {
		for _, e := range t {
			out = append(out, e)
		}
	}
	return out
}

// len counts the entries of every kind.
func (s *state) len() int { return len(s.plans) + len(s.keys) + len(s.costs) + len(s.rls) }
