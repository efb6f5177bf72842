// Package membership tracks the live limiter processes of one region with
// hashicorp/memberlist (SWIM gossip over UDP and TCP). A Membership's
// Processes count implements region.ProcessCounter, which divides lease
// caps and degraded floors among the region's processes.
//
// Every process of a region starts a Membership bound to its own address
// (flag --memberlist-bind) and joins any live member (flag
// --memberlist-join). Processes are counted while alive: a clean Stop
// leaves at once; a killed process is counted until memberlist declares it
// dead (a few seconds with the local profile).
//
// With Config.Keys (flag --memberlist-key) every message is encrypted and
// authenticated with AES-GCM and plaintext is refused both ways: only the
// processes that hold a key join and are counted, so nobody who merely
// reaches the memberlist port can inflate or deflate the count (and with
// it lease caps and degraded floors). Keys never print (Key.String).
//
// Concurrency: all methods are safe for concurrent use. OnChange is called
// from memberlist's goroutines, with memberlist's node lock held: it must
// not block (Processes may be called from it).
package membership
