//go:build !race

package main

// raceOn: the tests run under the race detector.
const raceOn = false
