// Package multiregion starts real limiter fleets in several regions on
// loopback and drives them through the failure table.
package multiregion
