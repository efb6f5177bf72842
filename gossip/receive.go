package gossip

import (
	"strings"
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
	numReasons
)

func (r rejectReason) String() string {
	switch r {
	case rejectSubject:
		return "subject_mismatch"
	case rejectRegion:
		return "unknown_region"
	}
	return "unknown"
}

// receive stores one digest from the wire, unless it is malformed or not
// its sender's to send.
func (n *Node) receive(subject string, data []byte) {
	d, err := DecodeDigest(data)
	if err != nil {
		n.mu.Lock()
		n.bad++
		n.mu.Unlock()
		n.log.Warn("bad gossip digest", "subject", subject, "err", err)
		return
	}
	if r, ok := n.refuse(subject, &d); ok {
		n.reject(r, subject, &d)
		return
	}
	if d.Region == n.cfg.Region && d.Process == n.cfg.Process {
		return // our own, stored when published
	}
	n.store(&d, n.clock.Now())
}

// refuse returns why d, received on subject, must not be stored.
func (n *Node) refuse(subject string, d *Digest) (rejectReason, bool) {
	region, process, ok := n.sender(subject)
	if !ok || region != d.Region || process != d.Process {
		return rejectSubject, true
	}
	if !n.regions[d.Region] {
		return rejectRegion, true
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
