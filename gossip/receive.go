package gossip

import (
	"strings"
	"time"
)

// A digest is bound to its sender: process p of region r publishes only on
// <Subject>.<r>.<p>, and a digest is stored only if it names the region and
// process of the subject it came on, and its region is in Config.Regions.
// A goodbye, too, ends only the process whose subject it came on. With NATS
// permissions that let each region's (or each process's) credentials
// publish only on its own subjects, no client can speak for another region
// or process; without them the check still keeps a confused or stale sender
// from overwriting another process's digest.

// rejectReason says why a decoded digest was refused; it labels
// quota_gossip_rejected_digests_total{reason}.
type rejectReason int

const (
	// rejectSubject: the digest's region or process is not its subject's,
	// or the subject is not <Subject>.<region>.<process>.
	rejectSubject rejectReason = iota
	// rejectRegion: the digest's region is not in Config.Regions.
	rejectRegion
	// rejectEpoch: the digest's epoch is more than one ahead of this
	// node's, or more than StaleAfter behind: stored, a future epoch would
	// supersede its process's real digests, and an old one says nothing
	// about the process being alive.
	rejectEpoch
	// rejectProcesses: a new process of a region that already has
	// Config.MaxProcesses.
	rejectProcesses
	// rejectConflict: a second digest of a process for one epoch, other
	// than the first: one of them is forged. Not refused but merged (see
	// mergeDigests); counted here because it proves a forger.
	rejectConflict
	numReasons
)

func (r rejectReason) String() string {
	switch r {
	case rejectSubject:
		return "subject_mismatch"
	case rejectRegion:
		return "unknown_region"
	case rejectEpoch:
		return "epoch_out_of_range"
	case rejectProcesses:
		return "too_many_processes"
	case rejectConflict:
		return "conflicting_digest"
	}
	return "unknown"
}

// badLogEvery is the least time between two log lines about malformed
// digests: a flood of them must not flood the log (the metric counts each).
const badLogEvery = time.Minute

// receive stores one digest from the wire, unless it is malformed or not
// its sender's to send.
func (n *Node) receive(subject string, data []byte) {
	now := n.clock.Now()
	d, err := DecodeDigest(data)
	if err != nil {
		n.badDigest(now, subject, err)
		return
	}
	if r, ok := n.refuse(now, subject, &d); ok {
		n.reject(r, subject, &d)
		return
	}
	if d.Region == n.cfg.Region && d.Process == n.cfg.Process && d.Goodbye {
		return // only this process leaves for itself
	}
	// Our own digests come back too: store ignores the echo, and merges a
	// forged one (same epoch, other content) with what we published.
	if r, ok := n.store(&d, now); ok {
		n.reject(r, subject, &d)
	}
}

// badDigest counts a digest the decoder refused, and logs at most one line
// per badLogEvery with how many came since the last. The decoder's errors
// name no key, so neither does the log.
func (n *Node) badDigest(now time.Time, subject string, err error) {
	n.mu.Lock()
	n.bad++
	var count uint64
	if n.badLogged.IsZero() || now.Sub(n.badLogged) >= badLogEvery {
		count = n.bad - n.badAtLog
		n.badLogged, n.badAtLog = now, n.bad
	}
	n.mu.Unlock()
	if count > 0 {
		n.log.Warn("bad gossip digests", "count", count, "since", badLogEvery, "last_subject", subject, "last_err", err)
	}
}

// refuse returns why d, received on subject at now, must not be stored.
func (n *Node) refuse(now time.Time, subject string, d *Digest) (rejectReason, bool) {
	region, process, ok := n.sender(subject)
	if !ok || region != d.Region || process != d.Process {
		return rejectSubject, true
	}
	if !n.regions[d.Region] {
		return rejectRegion, true
	}
	if e := n.epoch(now); d.Epoch > e+1 || d.Epoch+uint64(n.cfg.StaleAfter) < e {
		return rejectEpoch, true
	}
	return 0, false
}

// sender splits <Subject>.<region>.<process> into its region and process.
func (n *Node) sender(subject string) (region, process string, ok bool) {
	rest, ok := strings.CutPrefix(subject, n.cfg.Subject+".")
	if !ok {
		return "", "", false
	}
	region, process, ok = strings.Cut(rest, ".")
	if !ok || region == "" || process == "" || strings.Contains(process, ".") {
		return "", "", false
	}
	return region, process, true
}

// reject counts a refused digest. The first of each reason is logged as a
// warning, the rest at debug level: the metric is the alarm, and a flood of
// forged digests must not flood the log.
func (n *Node) reject(r rejectReason, subject string, d *Digest) {
	n.mu.Lock()
	n.rejected[r]++
	first := n.rejected[r] == 1
	n.mu.Unlock()
	level := n.log.Debug
	if first {
		level = n.log.Warn
	}
	level("gossip digest rejected", "reason", r.String(), "subject", subject,
		"digest_region", d.Region, "digest_process", d.Process, "goodbye", d.Goodbye)
}
