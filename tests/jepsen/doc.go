// Package jepsen is quorumbus's chaos suite: it runs a real cluster as
// separate processes, injects faults (package nemesis) while clients
// record what they did (package workload, package history), heals the
// faults, drains the queue and checks the history (package checker).
// docs/reliability.md says how to run it and what it checks.
package jepsen
