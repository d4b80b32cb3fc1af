package placement

import (
	"sync"

	"google.golang.org/protobuf/proto"

	pb "github.com/quorumbus/quorumbus/proto/placementpb"
	"github.com/quorumbus/quorumbus/proto/rpcbuf"
)

// encodedTable is a routing table marshalled once for all the streams
// that watch it: the codec (proto/rpcbuf) sends its bytes as they are.
// It is the whole namespace, sent to every watcher that does not ask for
// changes at every change, and to the others when they start: marshalled
// per stream, it cost more CPU than anything else while entities were
// being created.
type encodedTable struct {
	*pb.RoutingTable
	data []byte // never changed once set: streams may still be writing it
}

var _ rpcbuf.PiecesMarshaler = (*encodedTable)(nil)

func (e *encodedTable) MarshalPieces() ([][]byte, bool) { return [][]byte{e.data}, true }

// nextRoutes returns what a watcher whose table has version sent is sent
// next, and the version it brings the watcher to: what changed since, or
// the whole table when whole is set or the catalog no longer remembers
// what changed since sent (catalog.MaxRouteChanges).
//
// A change costs what changed (an entity created: that entity, with the
// groups and nodes); the whole table costs the namespace, to build, to
// encode and for every watcher to decode. Sent at every change, whole
// tables made each creation cost in proportion to the catalog.
func (s *Service) nextRoutes(sent uint64, whole bool) (msg any, version uint64, err error) {
	if !whole {
		if t, ok := s.fsm.ChangesSince(sent); ok {
			return t, t.Version, nil
		}
	}
	t := s.fsm.Table()
	enc, err := s.routes.encode(t)
	if err != nil {
		return nil, 0, err
	}
	return enc, t.Version, nil
}

// tableEncoder keeps the encoding of the latest table it was asked for.
// The zero value is ready to use.
type tableEncoder struct {
	mu    sync.Mutex
	table *pb.RoutingTable // what enc encodes; tables are shared and never changed
	enc   *encodedTable
}

// encode returns t encoded, marshalling it only if it is not the table
// encoded last.
func (c *tableEncoder) encode(t *pb.RoutingTable) (*encodedTable, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.table == t {
		return c.enc, nil
	}
	// The table's entities are the catalog's own records, never changed
	// once stored (catalog.State.mutable): the size each cached when it
	// was first marshalled still holds, so only new records are sized.
	// Sizing every record again cost more than writing them.
	data, err := proto.MarshalOptions{UseCachedSize: true}.Marshal(t)
	if err != nil {
		return nil, err
	}
	c.table, c.enc = t, &encodedTable{RoutingTable: t, data: data}
	return c.enc, nil
}
