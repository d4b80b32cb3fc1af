module github.com/quorumbus/quorumbus

go 1.26
