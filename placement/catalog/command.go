package catalog

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// FormatV1 is the first byte of every meta log entry and snapshot this
// version writes; the rest is protobuf.
const FormatV1 byte = 1

// Encode turns a command into a meta log entry.
func Encode(cmd *pb.CatalogCommand) ([]byte, error) {
	return proto.MarshalOptions{}.MarshalAppend([]byte{FormatV1}, cmd)
}

// Decode reads a meta log entry. It fails for an entry of another format
// and for bytes that are not a CatalogCommand; an op this version does not
// know decodes (protobuf keeps it as an unknown field) and is refused by
// Apply.
func Decode(data []byte) (*pb.CatalogCommand, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty entry", ErrCorrupt)
	}
	if data[0] != FormatV1 {
		return nil, fmt.Errorf("%w: %d", ErrUnknownFormat, data[0])
	}
	cmd := &pb.CatalogCommand{}
	if err := proto.Unmarshal(data[1:], cmd); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return cmd, nil
}
