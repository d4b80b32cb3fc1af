package compat

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// BenchmarkSessionAcceptNextSteps takes an accept-next apart on an
// otherwise idle dev cluster, sessions available: it does with go-amqp
// what the Go SDK's AcceptNextSessionForQueue does on the wire (v1.11,
// internal/amqpLinks.go initWithoutLocking), one step after another, and
// reports each step's p50 and p99, beside the SDK's own call and the
// front-end's AcceptSession call to the partition (its Raft commit) in
// the same cluster. docs/performance.md ("Sessions") has the figures.
//
//	go test ./tests/compat -run XXX -bench SessionAcceptNextSteps -benchtime 300x
//
// The steps, in the SDK's order:
//   - claim: a put-token on $cbs for the entity, on a session and pair of
//     links of its own that it closes after the answer (begin, two
//     attaches, the request, two detaches, end);
//   - claim-mgmt: the same for the entity's $management;
//   - begin: the AMQP session of the receiver;
//   - attach: the session receiver's attach with a null session filter,
//     answered once the partition committed the AcceptSession;
//   - mgmt: the $management links (a session of their own, two attaches).
func BenchmarkSessionAcceptNextSteps(b *testing.B) {
	c, client := startBenchDev(b, cluster.QueueSpec{Name: "sq", Props: &placementpb.QueueProperties{RequiresSession: true}})
	ctx := context.Background()
	conn, err := goamqp.Dial(ctx, "amqp://"+c.AMQPAddr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	audience := "sb://" + c.AMQPAddr + "/sq"
	token := sas.Sign(sas.DevKeyName, sas.DevKey, audience, time.Now().Add(time.Hour))
	mtoken := sas.Sign(sas.DevKeyName, sas.DevKey, audience+"/$management", time.Now().Add(time.Hour))

	// Sessions of one message each, enough for every accept below.
	sessions := b.N*2 + 400
	fill(b, ctx, client, "sq", sessions, 1)

	steps := []string{"claim", "claim-mgmt", "begin", "attach", "mgmt", "total"}
	took := map[string][]time.Duration{}
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		lap := start
		mark := func(step string) {
			now := time.Now()
			took[step] = append(took[step], now.Sub(lap))
			lap = now
		}
		if err := cbsClaim(ctx, conn, audience, token); err != nil {
			b.Fatal(err)
		}
		mark("claim")
		if err := cbsClaim(ctx, conn, audience+"/$management", mtoken); err != nil {
			b.Fatal(err)
		}
		mark("claim-mgmt")
		sess, err := conn.NewSession(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		mark("begin")
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		rcv, err := sess.NewReceiver(actx, "sq", &goamqp.ReceiverOptions{
			SettlementMode:            goamqp.ReceiverSettleModeFirst.Ptr(),
			RequestedSenderSettleMode: goamqp.SenderSettleModeSettled.Ptr(),
			Credit:                    -1,
			Filters:                   []goamqp.LinkFilter{goamqp.NewLinkFilter("com.microsoft:session-filter", 0x137000000C, nil)},
			Properties:                map[string]any{"com.microsoft:timeout": uint32(9_000)},
		})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		if sid, _ := rcv.LinkSourceFilterValue("com.microsoft:session-filter").(string); sid == "" {
			b.Fatal("accept-next got no session")
		}
		mark("attach")
		msess, err := conn.NewSession(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		msnd, err := msess.NewSender(ctx, "sq/$management", nil)
		if err != nil {
			b.Fatal(err)
		}
		mrcv, err := msess.NewReceiver(ctx, "sq/$management", &goamqp.ReceiverOptions{TargetAddress: "mgmt-reply", Credit: 100})
		if err != nil {
			b.Fatal(err)
		}
		mark("mgmt")
		took["total"] = append(took["total"], time.Since(start))

		// Not timed: take the session's message and give the session back.
		b.StopTimer()
		if err := rcv.IssueCredit(1); err != nil {
			b.Fatal(err)
		}
		if _, err := rcv.Receive(ctx, nil); err != nil {
			b.Fatal(err)
		}
		for _, l := range []interface{ Close(context.Context) error }{rcv, sess, mrcv, msnd, msess} {
			if err := l.Close(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	b.StopTimer()
	for _, s := range steps {
		b.Logf("%-10s p50 %v p99 %v", s, percentile(took[s], 0.5), percentile(took[s], 0.99))
		b.ReportMetric(ms(percentile(took[s], 0.5)), s+"-p50-ms")
		b.ReportMetric(ms(percentile(took[s], 0.99)), s+"-p99-ms")
	}

	// The SDK's own call, and the partition's commit alone, in the same
	// cluster: n of each.
	n := min(b.N, 200)
	var sdk, router []time.Duration
	for range n {
		start := time.Now()
		r, err := client.AcceptNextSessionForQueue(ctx, "sq", &azservicebus.SessionReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		if err != nil {
			b.Fatal(err)
		}
		sdk = append(sdk, time.Since(start))
		if _, err := r.ReceiveMessages(ctx, 1, nil); err != nil {
			b.Fatal(err)
		}
		r.Close(ctx)
	}
	e, err := c.Router.Entity("sq")
	if err != nil {
		b.Fatal(err)
	}
	for range n {
		start := time.Now()
		res, token, err := c.Router.AcceptSession(ctx, e, &partitionpb.AcceptSessionRequest{Next: true})
		if err != nil || res.GetSessionId() == "" {
			b.Fatalf("accept next at the router: %v %v", res, err)
		}
		router = append(router, time.Since(start))
		if _, err := c.Router.ReleaseSession(ctx, e, &partitionpb.ReleaseSession{SessionId: res.SessionId, Token: token}); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("%-10s p50 %v p99 %v", "sdk", percentile(sdk, 0.5), percentile(sdk, 0.99))
	b.Logf("%-10s p50 %v p99 %v", "router", percentile(router, 0.5), percentile(router, 0.99))
	b.ReportMetric(ms(percentile(sdk, 0.5)), "sdk-p50-ms")
	b.ReportMetric(ms(percentile(sdk, 0.99)), "sdk-p99-ms")
	b.ReportMetric(ms(percentile(router, 0.5)), "router-p50-ms")
	b.ReportMetric(ms(percentile(router, 0.99)), "router-p99-ms")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// cbsClaim puts token on $cbs for audience as the Go SDK does: on a
// session and links of its own, closed once answered.
func cbsClaim(ctx context.Context, conn *goamqp.Conn, audience, token string) error {
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		return err
	}
	defer s.Close(ctx)
	snd, err := s.NewSender(ctx, "$cbs", nil)
	if err != nil {
		return err
	}
	defer snd.Close(ctx)
	rcv, err := s.NewReceiver(ctx, "$cbs", &goamqp.ReceiverOptions{TargetAddress: "cbs-reply", Credit: 1})
	if err != nil {
		return err
	}
	defer rcv.Close(ctx)
	replyTo := "cbs-reply"
	if err := snd.Send(ctx, &goamqp.Message{
		Properties: &goamqp.MessageProperties{MessageID: "put", ReplyTo: &replyTo},
		ApplicationProperties: map[string]any{
			"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": audience,
		},
		Value: token,
	}, nil); err != nil {
		return err
	}
	resp, err := rcv.Receive(ctx, nil)
	if err != nil {
		return err
	}
	if status, _ := resp.ApplicationProperties["status-code"].(int32); status != 202 {
		return fmt.Errorf("put-token for %s: status %d %v", audience, status, resp.ApplicationProperties["status-description"])
	}
	return nil
}
