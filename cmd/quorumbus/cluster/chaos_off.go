//go:build !chaostest

package cluster

import (
	"log/slog"

	"github.com/quorumbus/quorumbus/node"
)

// armChaos does nothing in a production build: the chaos suite's hooks
// (chaos.go) are compiled only with -tags chaostest.
func armChaos(*node.Config, *slog.Logger) (started func(*node.Node), err error) {
	return func(*node.Node) {}, nil
}
