// Package partition computes each region's share of a key's global limit from
// demand, history and floors. It is pure arithmetic: no I/O, no clock, no
// network client.
package partition
