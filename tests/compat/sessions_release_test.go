package compat

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestSessionReleaseOnTheLink: messages a session receiver releases
// (what the Go SDK's releaser does with arrivals after ReceiveMessages
// returned) come back on the same link, before the session's messages
// not handed out yet, whether they were released before the later ones
// were delivered or after; nothing stays locked to the link.
func TestSessionReleaseOnTheLink(t *testing.T) {
	t.Parallel()
	c := startTestDev(t, cluster.QueueSpec{Name: "srel", Props: &placementpb.QueueProperties{RequiresSession: true}})
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	snd, err := client.NewSender("srel", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, sid := range []string{"early", "late"} {
		for i := range 8 {
			if err := snd.SendMessage(ctx, &azservicebus.Message{SessionID: &sid, Body: []byte(fmt.Sprint(i))}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		sid      string
		first    int   // credit before the settlements
		released []int // of the first delivered
		want     []string
	}{
		// 1 and 2 released before anything later was delivered.
		{"early", 3, []int{1, 2}, []string{"1", "2", "3", "4", "5", "6", "7"}},
		// 3 and 4 released after 5 was delivered and locked.
		{"late", 6, []int{3, 4}, []string{"3", "4", "6", "7"}},
	} {
		t.Run(tc.sid, func(t *testing.T) {
			rcv, err := dialSession(t, ctx, c.AMQPAddr).NewReceiver(ctx, "srel", &goamqp.ReceiverOptions{
				SettlementMode: goamqp.ReceiverSettleModeSecond.Ptr(),
				Credit:         -1,
				Filters:        []goamqp.LinkFilter{goamqp.NewLinkFilter("com.microsoft:session-filter", 0x137000000C, tc.sid)},
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := rcv.IssueCredit(uint32(tc.first)); err != nil {
				t.Fatal(err)
			}
			for i := range tc.first {
				m, err := rcv.Receive(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if got := string(m.GetData()); got != fmt.Sprint(i) {
					t.Fatalf("delivery %d: %s", i, got)
				}
				settle := rcv.AcceptMessage
				if slices.Contains(tc.released, i) {
					settle = rcv.ReleaseMessage
				}
				if err := settle(ctx, m); err != nil {
					t.Fatal(err)
				}
			}
			if err := rcv.IssueCredit(uint32(len(tc.want))); err != nil {
				t.Fatal(err)
			}
			var got []string
			for range tc.want {
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				m, err := rcv.Receive(rctx, nil)
				cancel()
				if err != nil {
					t.Fatalf("after %v: %v", got, err)
				}
				got = append(got, string(m.GetData()))
				if err := rcv.AcceptMessage(ctx, m); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("after releasing %v: %v, want %v", tc.released, got, tc.want)
			}
		})
	}
}
