//go:build !race

package node

// raceOn: the tests run under the race detector.
const raceOn = false
