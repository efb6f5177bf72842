// Package gossip exchanges compact demand digests between the limiter
// processes of every region over NATS, and turns them into this region's
// share of every key's global limit (a region.ShareSource), as decided in
// (docs/design.md [shares-gossip]).
//
// # What a Node does
//
// A Node is one limiter process's gossip agent. The daemon tees the
// limiter's usage stream into it (Node implements limit.UsageSink), hands
// it to the limiter as the ShareSource, and passes Limiter.Reshare as
// Config.OnChange. Every Config.Interval, on interval boundaries of the
// clock (so that all processes tick together), the Node
//
//  1. computes the shares of every key it has digests for, from the latest
//     digest of every live process published before this tick (its own
//     included), with partition.Shares, and swaps them in atomically;
//  2. folds the usage recorded since the last tick into per-key EWMAs of
//     demand (spent + rejected) and admitted cost (spent), applies
//     hysteresis (partition.Hold), and publishes its digest: the top keys
//     by demand (bounded by Config.TopK and Config.MaxDigestBytes, under
//     64 KiB) and its totals, on subject <Subject>.<region>.<process>.
//
// Every process subscribes to <Subject>.> and keeps the latest digest per
// (region, process); a region's demand is the sum over its processes.
//
// # Who may say what
//
// The regions that share limits are configuration (Config.Regions, flag
// --regions): shares are split over exactly these. A digest is stored only
// if it names the region and process of the subject it came on (a goodbye
// ends only the process whose subject it came on) and its region is
// configured; any other is counted in
// quota_gossip_rejected_digests_total{reason} and changes nothing: it takes
// no share and, never stored, cannot freeze shares by missing an epoch.
// NATS permissions that let each region publish only on
// <Subject>.<region>.> make the subject the sender's proof of identity.
// Message volume is one digest per process per interval: O(processes), not
// O(requests).
//
// # Bounded trust
//
// Every limiter of a region shares the region's credentials, so whoever
// holds them may speak for any process of that region. What it says is
// bounded (trust.go): a goodbye only marks its process as leaving, and a
// region is dropped only once all its processes said goodbye and stayed
// silent for Config.StaleAfter intervals, so goodbyes its own digests
// contradict take nothing from it; a process's claims count in proportion
// to the receiver's own count of ticks it has heard the process, over
// Config.TrustRamp, and a key's age is capped by that count; a region's
// claims for a key count up to Config.MaxClaim × the key's rate
// (Config.Rate), and learned region weights stay within Config.WeightBand
// of the configured ones; only trusted processes freeze shares when
// missing; and
// processes per region, keys per digest and keys per region are capped
// (Config.MaxProcesses, MaxKeys, MaxRegionKeys), refusals counted in
// quota_gossip_rejected_digests_total and quota_gossip_dropped_keys_total;
// a region whose processes do not all fit is crowded, and counts for the
// other regions as claiming its maximum (room.go), so that invented
// processes filling its slots cannot hide its real claims.
// Digests more than one epoch ahead or StaleAfter behind are refused.
// Digests timed to reach some regions just before a tick and others just
// after can lift the regions' own shares above 1 for the ticks they
// straddle, unless Config.StrictOwnView makes a node count the processes
// of its own region by the least of their last two digests (see
// ownViewLocked), which costs admission at all times.
//
// # Why every region computes the same shares
//
// Smoothing and hysteresis happen where demand is measured, before it is
// published, so shares are a pure function of the published digests. A
// digest of epoch e (published at tick e) is used by everybody at tick e+1,
// the process's own included. As long as a digest crosses the gateways in
// less than half an interval and clocks agree to within a fraction of it,
// every process in every region computes identical shares for every key
// once demand is steady, and the shares of a key sum to exactly 1
// (partition works in integer micro-shares). With Config.StrictOwnView a
// node counts its own region's processes by the least of their last two
// digests, so while a region's demand rises its own share trails, the sum
// is below 1, and no digest that reaches some regions late can lift it
// above 1.
//
// # Partitions and the global bound
//
// At tick e a Node needs a digest of epoch e-1 from every region whose
// trusted processes it knows. If a region has none (partitioned away,
// crashed), the Node freezes: it keeps its last shares for every key. A
// trusted process late while others of its region are heard counts with
// its last digest instead; an untrusted one (see Bounded trust) is left out
// until its digest comes, and never freezes anything. Across a partition
// both sides miss each other's digests of the same epoch, so every region
// freezes at the same tick, on shares computed from identical inputs: the
// sum over regions of each region's own share stays exactly 1, however long
// the partition lasts. The only disagreement is at the edge: a digest that
// crossed to some regions but not others just as the link failed, which
// can move one tick's shares by one digest's worth. Shares stop following
// demand during the partition. Gossip age per region (Age, Snapshot, and
// the quota_gossip_age_seconds metric) shows it.
//
// A process of a region that is still heard is dropped after StaleAfter
// intervals of silence.
//
// A region that leaves cleanly (every process calls Stop, which publishes
// a goodbye) is removed and its share redistributed once it has been
// silent for StaleAfter intervals; until then its last digests count, so
// the others never take a share it may still enforce. A region that
// crashed is indistinguishable from a partitioned one and stays frozen in:
// an operator removes it with Forget.
//
// A new process only listens during its first tick, so that by its second
// it holds the previous epoch's digest of every live process, and it keeps
// to the default shares until it has a digest of every configured region
// or Config.WarmUp intervals have passed: the configured Weights split over
// every region in Regions (equal without Weights). It never takes the whole
// limit for want of news from the other regions; only a deployment that
// configures one region (Regions holds just this one) gets the whole limit.
// A configured region still unheard after the warm-up holds its floor.
//
// # Concurrency and time
//
// All methods are safe for concurrent use. Share is lock-free (an atomic
// pointer to an immutable table). Run owns one goroutine's worth of work;
// the NATS subscription delivers into a channel that Run drains.
//
// Time comes from Config.Clock, a clock.Clock (nil is clock.System()). Run
// waits for each tick on a timer from Clock.NewTimer, set for the next
// multiple of Interval on that clock; epochs, digest ages and gossip ages
// are read from Clock.Now. With a clock.Manual, Run ticks when the clock is
// advanced to a boundary, and Manual.BlockUntil(1) returns once Run waits
// for its next tick, so a test drives ticks without sleeping. Processes
// agree on epochs only as far as their clocks agree (see "Why every region
// computes the same shares"). Only Stop's goodbye is bounded on real time
// (a 1 s NATS flush), as it waits on the network.
package gossip
