package gateway

import (
	"bytes"
	"testing"

	"github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestPreviewOfCutAndWholeMessages: a message a partition cut to the
// preview shows its whole size and is marked truncated; one a node that
// predates the cut answered whole is cut here, with the same preview; a
// small one is shown whole either way.
func TestPreviewOfCutAndWholeMessages(t *testing.T) {
	bare := func(body []byte) []byte {
		b, err := (&amqp.Message{ApplicationProperties: map[string]any{"k": "v"}, Data: [][]byte{body}}).MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	big := bytes.Repeat([]byte("ab"), 10_000)
	whole := bare(big)
	cut := bare(big[:bodyPreview])
	fromNew := messageOf(&partitionpb.Message{SequenceNumber: 1, Bare: cut, Size: int64(len(whole)), BodyTruncated: true})
	fromOld := messageOf(&partitionpb.Message{SequenceNumber: 1, Bare: whole})
	if fromNew.Size != int64(len(whole)) || fromOld.Size != int64(len(whole)) {
		t.Errorf("sizes %d and %d, want %d", fromNew.Size, fromOld.Size, len(whole))
	}
	if fromNew.Body != string(big[:bodyPreview]) || !fromNew.BodyTruncated || fromNew.Properties["k"] != "v" {
		t.Errorf("the cut message: %d bytes, truncated %v, properties %v", len(fromNew.Body), fromNew.BodyTruncated, fromNew.Properties)
	}
	if fromOld.Body != fromNew.Body || !fromOld.BodyTruncated {
		t.Errorf("the whole message's preview differs: %d bytes, truncated %v", len(fromOld.Body), fromOld.BodyTruncated)
	}
	small := bare([]byte("hi"))
	if m := messageOf(&partitionpb.Message{SequenceNumber: 1, Bare: small, Size: int64(len(small))}); m.Body != "hi" || m.BodyTruncated || m.Size != int64(len(small)) {
		t.Errorf("the small message: %+v", m)
	}
}
