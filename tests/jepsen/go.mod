module github.com/quorumbus/quorumbus/tests/jepsen

go 1.26.0

// The harness imports the broker's protobuf clients (to ask which node
// leads a partition group) from this checkout, never from a released
// version: it tests the tree it sits in.
replace github.com/quorumbus/quorumbus => ../..
