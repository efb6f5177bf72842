// Package gossip exchanges compact demand digests between regions over NATS,
// and turns them into each region's share of every key's limit.
package gossip
