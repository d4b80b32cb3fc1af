package frontend_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// A receive-and-delete receiver that grants little credit at a time makes
// the client send a flow for nearly every message, racing the front-end's
// deliveries. Every message the partitions hand out (and so delete) must
// reach the client: none may be dropped for want of credit.
func TestReceiveAndDeleteLosesNothingUnderFlowChurn(t *testing.T) {
	const n = 1000
	credits := []int32{1, 3, 7}
	var queues []string
	for _, c := range credits {
		queues = append(queues, fmt.Sprint("q", c))
	}
	b := newMemBackend(queues...)
	for _, q := range queues {
		e, _ := b.Entity(q)
		for range n / 100 {
			batch := make([]*partitionpb.NewMessage, 100)
			for i := range batch {
				batch[i] = &partitionpb.NewMessage{Bare: []byte{0x00, 0x53, 0x75, 0xa0, 0x01, 'x'}}
			}
			if _, err := b.Send(context.Background(), e, 0, batch); err != nil {
				t.Fatal(err)
			}
		}
	}
	addr := startFrontend(t, b)
	for i, credit := range credits {
		t.Run(fmt.Sprint("credit", credit), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			conn, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain(sas.DevKeyName, sas.DevKey)})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			sess, err := conn.NewSession(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			rcv, err := sess.NewReceiver(ctx, queues[i], &goamqp.ReceiverOptions{Credit: credit, RequestedSenderSettleMode: goamqp.SenderSettleModeSettled.Ptr()})
			if err != nil {
				t.Fatal(err)
			}
			for got := range n {
				if _, err := rcv.Receive(ctx, nil); err != nil {
					t.Fatalf("receive %d of %d: %v (left in the queue: %d)", got, n, err, b.left(queues[i]))
				}
			}
		})
	}
}
