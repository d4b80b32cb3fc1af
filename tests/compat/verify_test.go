package compat

import "github.com/quorumbus/quorumbus/partition/store"

// The dev clusters of these tests run in the test's process: every topic
// copy the store writes from the copy before it is checked against its
// full encoding as well (store.VerifyCopies), with the SDKs' messages,
// rules and actions. The benchmarks turn it off (topics_bench_test.go).
func init() { store.VerifyCopies = true }
