package compat

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestDevPeekBoundedInBytes: a peek's answer keeps to the front-end's
// bound in bytes (frontend.Config.PeekMaxBytes, 3 MiB here), whatever the
// count asked for, and a message larger than the bound comes alone; the
// Go SDK, paging on from the last number it saw, gets every message once,
// whole and byte for byte, on a plain queue and on a partitioned one
// (whose partitions are first asked for one message each with its body
// cut, then for the page whole), with a count of 32 and of 1.
func TestDevPeekBoundedInBytes(t *testing.T) {
	t.Parallel()
	const bound = 3 << 20
	// A partitioned entity takes messages of at most 1 MiB.
	c := startTestDevWith(t, func(o *cluster.DevOptions) { o.PeekMaxBytes = bound },
		cluster.QueueSpec{Name: "plain", Props: &placementpb.QueueProperties{MaxMessageSizeInKilobytes: 8 << 10, MaxSizeInMegabytes: 1024}},
		cluster.QueueSpec{Name: "parted", Props: &placementpb.QueueProperties{MaxMessageSizeInKilobytes: 1 << 10, MaxSizeInMegabytes: 1024, PartitionCount: 4}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client := devClient(t, c)

	// Sizes in KiB: pages of two or three, and on the plain queue one
	// message larger than the bound.
	sizesOf := map[string][]int{
		"plain":  {1024, 900, 1100, 2500, 4200, 1536, 700, 64, 1536},
		"parted": {1000, 1000, 900, 1000, 800, 64, 1000, 1000, 700, 1000, 900, 1000},
	}
	bodies := map[string][]byte{}
	for _, q := range []string{"plain", "parted"} {
		sizes := sizesOf[q]
		snd, err := client.NewSender(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, kib := range sizes {
			id := fmt.Sprintf("%s-%d", q, i)
			body := make([]byte, kib<<10)
			for j := range body {
				body[j] = byte(j*13 + i)
			}
			bodies[id] = body
			for {
				err := snd.SendMessage(ctx, &azservicebus.Message{MessageID: &id, Body: body}, nil)
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("send %s: %v", id, err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		snd.Close(ctx)
	}

	for _, q := range []string{"plain", "parted"} {
		for _, count := range []int{32, 1} {
			rcv, err := client.NewReceiverForQueue(q, nil)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			var pages, multi int
			var last int64 = -1
			for {
				page, err := rcv.PeekMessages(ctx, count, nil)
				if err != nil {
					t.Fatalf("%s: peek %d after %d pages: %v", q, count, pages, err)
				}
				if len(page) == 0 {
					break
				}
				pages++
				var total int
				for _, m := range page {
					id := m.MessageID
					if seen[id] {
						t.Fatalf("%s: %s peeked twice", q, id)
					}
					seen[id] = true
					if !bytes.Equal(m.Body, bodies[id]) {
						t.Fatalf("%s: %s peeked with %d bytes, sent %d (or they differ)", q, id, len(m.Body), len(bodies[id]))
					}
					if *m.SequenceNumber <= last {
						t.Fatalf("%s: %s's number %d after %d", q, id, *m.SequenceNumber, last)
					}
					last = *m.SequenceNumber
					total += len(m.Body)
				}
				if len(page) > 1 {
					multi++
					if total > bound {
						t.Fatalf("%s: a page of %d messages holds %d bytes of bodies, over the bound of %d", q, len(page), total, bound)
					}
				}
				if len(page) > count {
					t.Fatalf("%s: %d messages for a count of %d", q, len(page), count)
				}
			}
			rcv.Close(ctx)
			if len(seen) != len(sizesOf[q]) {
				t.Fatalf("%s: paged through %d messages of %d, count %d", q, len(seen), len(sizesOf[q]), count)
			}
			// Fewer a page than asked, but more than one where they
			// fit (a partitioned queue's pages are one partition's
			// each, which may hold one message).
			if count > 1 && q == "plain" && multi == 0 {
				t.Fatalf("%s: every page held one message", q)
			}
			t.Logf("%s: %d messages in %d pages (count %d)", q, len(seen), pages, count)
		}
	}
}
