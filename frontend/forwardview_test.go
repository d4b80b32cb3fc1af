package frontend

import (
	"testing"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestForTopic: a message forwarded to a topic gets the view of the
// message as delivered from its source: the source's rule action and
// modified properties are written into the bare message (and leave the
// origin), the dead-letter fields stay in the origin but show in the view.
func TestForTopic(t *testing.T) {
	bare, err := (&amqp.Message{
		Properties:            &amqp.Properties{MessageID: "m1", Subject: "s", To: "a"},
		ApplicationProperties: amqp.Map{{Key: "color", Value: "red"}, {Key: "gone", Value: int64(1)}, {Key: "n", Value: int32(3)}},
		Data:                  [][]byte{[]byte("body")},
	}).Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := (&amqp.Message{ApplicationProperties: amqp.Map{{Key: "n", Value: int64(9)}}}).Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	o := &partitionpb.ForwardOrigin{Hops: 1, DeadLetterReason: "why", DeadLetterDescription: "d", DeadLetterSource: "src",
		ActionSet: &partitionpb.FilterView{To: "b", Properties: map[string]*placementpb.RuleValue{
			"tag": {Value: &placementpb.RuleValue_StringValue{StringValue: "t"}}}},
		ActionRemoved: []string{"gone"}, ModifiedProperties: [][]byte{mod}}
	nm := &partitionpb.NewMessage{Bare: bare, Forwarded: o}
	if err := ForTopic(nm); err != nil {
		t.Fatal(err)
	}
	v := nm.FilterView
	str := func(k string) string { return v.GetProperties()[k].GetStringValue() }
	if v.GetSubject() != "s" || v.GetTo() != "b" || str("color") != "red" || str("tag") != "t" || v.Properties["gone"] != nil ||
		v.Properties["n"].GetLongValue() != 9 || str("DeadLetterReason") != "why" || str("DeadLetterErrorDescription") != "d" {
		t.Fatalf("view %v", v)
	}
	if o.ActionSet != nil || o.ActionRemoved != nil || o.ModifiedProperties != nil || o.DeadLetterSource != "src" || o.DeadLetterReason != "why" {
		t.Fatalf("origin after: %v", o)
	}
	// The bare message delivered again reads the same: the rewrite is
	// in it.
	again := &partitionpb.NewMessage{Bare: nm.Bare}
	if err := ForTopic(again); err != nil || again.FilterView.GetTo() != "b" || again.FilterView.Properties["tag"] == nil {
		t.Fatalf("the rewritten message's own view: %v, %v", again.FilterView, err)
	}
	// Not AMQP: an error, nothing set.
	bad := &partitionpb.NewMessage{Bare: []byte{0xff}}
	if err := ForTopic(bad); err == nil || bad.FilterView != nil {
		t.Fatalf("a malformed message: %v, view %v", err, bad.FilterView)
	}
}

// FuzzForTopic: whatever bytes a forwarded message holds, ForTopic
// answers an error or a view, and never panics.
func FuzzForTopic(f *testing.F) {
	bare, _ := (&amqp.Message{Properties: &amqp.Properties{MessageID: "m", Subject: "s"},
		ApplicationProperties: amqp.Map{{Key: "k", Value: "v"}}, Data: [][]byte{[]byte("x")}}).Append(nil)
	f.Add(bare, true)
	f.Add([]byte{0x00, 0x53, 0x74, 0xc1, 0x01, 0x00}, false)
	f.Fuzz(func(t *testing.T, bare []byte, changed bool) {
		nm := &partitionpb.NewMessage{Bare: bare, Forwarded: &partitionpb.ForwardOrigin{Hops: 1}}
		if changed {
			nm.Forwarded.ActionRemoved = []string{"k"}
			nm.Forwarded.ActionSet = &partitionpb.FilterView{Subject: "t"}
		}
		if err := ForTopic(nm); err == nil && nm.FilterView == nil {
			t.Fatal("no error and no view")
		}
	})
}
