//go:build race

package limitapi_test

const raceEnabled = true
