module github.com/quorumbus/quorumbus

go 1.26

require github.com/Azure/go-amqp v1.7.0
