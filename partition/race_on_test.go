//go:build race

package partition_test

// raceOn: the tests run under the race detector.
const raceOn = true
