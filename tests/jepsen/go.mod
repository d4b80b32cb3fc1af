module github.com/quorumbus/quorumbus/tests/jepsen

go 1.26.0

// The harness imports the broker's protobuf clients (to ask which node
// leads a partition group) from this checkout, never from a released
// version: it tests the tree it sits in.
replace github.com/quorumbus/quorumbus => ../..

require (
	github.com/Azure/go-amqp v1.7.0
	github.com/quorumbus/quorumbus v0.0.0-00010101000000-000000000000
	golang.org/x/sys v0.48.0
	google.golang.org/grpc v1.85.0
)

require (
	github.com/anishathalye/porcupine v1.3.1 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
