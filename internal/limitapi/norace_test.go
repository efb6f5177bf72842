//go:build !race

package limitapi_test

const raceEnabled = false
