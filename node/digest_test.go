package node_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/quorumbus/quorumbus/node/nodetest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestDigestSameOnEveryReplica: every replica answers Digest, not only
// the leader, and replicas that applied the same entries report the same
// digest, with bodies in the Raft log on one and in the store on another
// (the first digest moves the bodies of the replica it asks into its
// store). A replica restarted after the sends catches up to the same one.
// A later send changes the digest.
func TestDigestSameOnEveryReplica(t *testing.T) {
	c := nodetest.StartCluster(t, 3, group)
	cl := c.Client(group)
	upsertEntity(t, cl, 60_000)
	for i := range 20 {
		if _, err := send(ctxFor(t), cl, fmt.Sprintf("m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	msgs := receive(t, cl, 5, false, 0)
	if r := settle(t, cl, partitionpb.Disposition_DISPOSITION_COMPLETE, msgs[:2]...); r.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatalf("settle: %v", r)
	}
	c.Kill(2)
	c.Restart(2)

	digests := func() []*partitionpb.DigestResponse {
		var out []*partitionpb.DigestResponse
		for i := range c.Len() {
			d, err := c.DirectClient(i).Digest(ctxFor(t), &partitionpb.DigestRequest{GroupId: group})
			if err != nil {
				t.Fatalf("n%d: Digest: %v", i, err)
			}
			out = append(out, d)
		}
		return out
	}
	var first []*partitionpb.DigestResponse
	c.WaitFor("every replica at one applied index", func() bool {
		first = digests()
		return first[0].AppliedIndex == first[1].AppliedIndex && first[1].AppliedIndex == first[2].AppliedIndex
	})
	for i, d := range first[1:] {
		if !bytes.Equal(d.Sha256, first[0].Sha256) || d.SnapshotBytes != first[0].SnapshotBytes {
			t.Errorf("n%d: digest %x (%d bytes) at index %d, n0 %x (%d bytes)", i+1, d.Sha256, d.SnapshotBytes, d.AppliedIndex, first[0].Sha256, first[0].SnapshotBytes)
		}
	}
	if len(first[0].Sha256) != 32 {
		t.Fatalf("digest of %d bytes, want a SHA-256", len(first[0].Sha256))
	}

	if _, err := send(ctxFor(t), cl, "later"); err != nil {
		t.Fatal(err)
	}
	var after []*partitionpb.DigestResponse
	c.WaitFor("every replica past the later send", func() bool {
		after = digests()
		return after[0].AppliedIndex > first[0].AppliedIndex && after[0].AppliedIndex == after[1].AppliedIndex && after[1].AppliedIndex == after[2].AppliedIndex
	})
	if bytes.Equal(after[0].Sha256, first[0].Sha256) {
		t.Error("a send did not change the digest")
	}
	for i, d := range after[1:] {
		if !bytes.Equal(d.Sha256, after[0].Sha256) {
			t.Errorf("after the send, n%d: digest %x, n0 %x", i+1, d.Sha256, after[0].Sha256)
		}
	}
}
