//go:build race

package compat

// raceOn: the tests run under the race detector.
const raceOn = true
