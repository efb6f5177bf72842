//go:build !race

package limitmetrics_test

const raceEnabled = false
