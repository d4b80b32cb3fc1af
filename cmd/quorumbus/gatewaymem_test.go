package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/frontend/routing"
	"github.com/quorumbus/quorumbus/gateway"
	"github.com/quorumbus/quorumbus/placement/sas"
)

// TestGatewayMemoryFlat: the gateway keeps nothing per message. A
// gateway wired as `quorumbus gateway` wires it (a router, the catalog,
// gateway.Gateway) runs in this process in front of three storage
// processes and a front-end process; the heap it holds after a GC is
// read before and after tens of thousands of messages (some of 250 KiB)
// are sent to a plain and a partitioned queue and some dead-lettered,
// and while lists, gets, console peeks of both sub-queues and metrics
// scrapes go through it. What it holds must not grow with what the
// queues hold (a bound of 16 MiB against ~100 MiB sent); the figures
// are logged (docs/performance.md).
func TestGatewayMemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and sends ~100 MiB")
	}
	if raceOn {
		// 117 MiB through the SDK in this process: 130 s under the
		// detector at load 17, against 43 s without it.
		t.Skip("moves ~100 MiB in this process: run without -race (make test does)")
	}
	c := startPlainCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	router, err := routing.New(routing.Config{Placement: c.grpcAddrs, Logger: quiet, Rules: []sas.Rule{sas.DevRule()}})
	if err != nil {
		t.Fatal(err)
	}
	router.Start(ctx)
	defer router.Close()
	catalog, closeCatalog, err := cluster.DialPlacementMembers(c.grpcAddrs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeCatalog()
	gw, err := gateway.New(gateway.Config{
		Catalog: catalog, Stats: router, Messages: router, Topology: router, Logger: quiet,
		Validator: gateway.RulesValidator{Rules: router},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	defer srv.Close()
	token := sas.Sign(sas.DevKeyName, sas.DevKey, srv.URL+"/", time.Now().Add(time.Hour))
	call := func(method, path, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, out
	}
	queues := map[string]string{
		"mem":  ``,
		"memp": `<EnablePartitioning>true</EnablePartitioning>`,
	}
	for name, props := range queues {
		body := `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">` + props + `</QueueDescription></content></entry>`
		for {
			code, out := call(http.MethodPut, "/"+name+"?api-version=2024-05", body)
			if code == http.StatusCreated {
				break
			}
			if code != http.StatusServiceUnavailable || ctx.Err() != nil {
				t.Fatalf("create %s: %d %s", name, code, out)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	reg := prometheus.NewRegistry()
	if err := reg.Register(gw.Collector()); err != nil {
		t.Fatal(err)
	}
	// work is what an operator's tools do: lists with counts, gets, the
	// console's peeks of every page of both sub-queues, scrapes.
	var peeked, served int
	work := func() {
		t.Helper()
		for range 3 {
			for _, path := range []string{"/$Resources/Queues?api-version=2024-05&$top=100", "/mem?api-version=2024-05", "/memp?api-version=2024-05"} {
				code, out := call(http.MethodGet, path, "")
				if code != http.StatusOK {
					t.Fatalf("GET %s: %d %s", path, code, out)
				}
				served += len(out)
			}
			if _, err := reg.Gather(); err != nil {
				t.Fatal(err)
			}
		}
		for name := range queues {
			for _, dlq := range []string{"0", "1"} {
				from := map[uint32]uint64{}
				for page := 0; ; page++ {
					var fs []string
					for _, s := range from {
						fs = append(fs, fmt.Sprint(s))
					}
					code, out := call(http.MethodGet, "/$console/api/messages?n=100&name="+name+"&dlq="+dlq+"&from="+strings.Join(fs, ","), "")
					if code != http.StatusOK {
						t.Fatalf("peek %s dlq=%s: %d %s", name, dlq, code, out)
					}
					served += len(out)
					var msgs []struct {
						SequenceNumber uint64 `json:"sequenceNumber"`
						Partition      uint32 `json:"partition"`
					}
					if err := json.Unmarshal(out, &msgs); err != nil {
						t.Fatal(err)
					}
					if len(msgs) == 0 {
						break
					}
					peeked += len(msgs)
					for _, m := range msgs {
						from[m.Partition] = max(from[m.Partition], m.SequenceNumber+1)
					}
				}
			}
		}
	}
	// heap is what the process holds after a collection: the gateway, its
	// router and catalog client, and this test's own leftovers.
	heap := func() uint64 {
		runtime.GC()
		debug.FreeOSMemory()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	work() // connections, the routing table, first-use allocations
	before := heap()

	// Send: 10,000 × 1 KiB and 200 × 250 KiB to each queue, in batches,
	// then dead-letter 500 of each.
	client, err := azservicebus.NewClientFromConnectionString(cluster.ConnectionString(c.amqpAddr), nil)
	if err != nil {
		t.Fatal(err)
	}
	const small, large = 10_000, 200
	sent := 0
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(queues))
	for name := range queues {
		for _, spec := range []struct{ n, size int }{{small, 1 << 10}, {large, 250 << 10}} {
			sent += spec.n * spec.size
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- sendBatches(ctx, client, name, spec.n, spec.size)
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	const dead = 500
	for name := range queues {
		rcv, err := client.NewReceiverForQueue(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		for got := 0; got < dead; {
			msgs, err := rcv.ReceiveMessages(ctx, min(100, dead-got), nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				if err := rcv.DeadLetterMessage(ctx, m, nil); err != nil {
					t.Fatal(err)
				}
				got++
			}
		}
		rcv.Close(ctx)
	}
	client.Close(ctx)

	// Watch the heap's peak while the gateway serves the tools, and
	// count what it allocates meanwhile: the peak depends on when the
	// collector ran, what was allocated does not (a peek of whole bodies
	// allocates them, a preview 4 KiB of each).
	stop := make(chan struct{})
	var peak uint64
	var watched sync.WaitGroup
	watched.Add(1)
	go func() {
		defer watched.Done()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	peeked, served = 0, 0
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	allocated := ms.TotalAlloc
	start := time.Now()
	work()
	took := time.Since(start)
	close(stop)
	watched.Wait()
	runtime.ReadMemStats(&ms)
	allocated = ms.TotalAlloc - allocated
	after := heap()
	want := 2 * (small + large) // both sub-queues of both queues: each message once
	if peeked != want {
		t.Errorf("peeked %d messages through the console, want %d", peeked, want)
	}
	t.Logf("heap in use after GC: %.1f MiB before, %.1f MiB after %d MiB sent to 2 queues (%d messages) and %d peeked, %.1f MiB served, in %v; peak %.1f MiB while serving, %.0f MiB allocated",
		mib(before), mib(after), sent>>20, 2*(small+large), peeked, mib(uint64(served)), took.Round(time.Millisecond), mib(peak), mib(allocated))
	if after > before+16<<20 {
		t.Errorf("the gateway's heap grew by %.1f MiB with the messages", mib(after)-mib(before))
	}
	// Peeking every message once with whole bodies allocated 600-650 MiB
	// (each body decoded from gRPC, then from AMQP); with bodies cut to
	// the preview by the partitions, 215-235 MiB (docs/performance.md).
	if allocated > 3*uint64(sent) {
		t.Errorf("serving allocated %.0f MiB, over 3 × the %d MiB the queues hold: do peeks carry whole bodies?", mib(allocated), sent>>20)
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// sendBatches sends n messages of size bytes to queue in batches as
// large as the SDK makes them, retrying until the front-end routes the
// queue.
func sendBatches(ctx context.Context, client *azservicebus.Client, queue string, n, size int) error {
	snd, err := client.NewSender(queue, nil)
	if err != nil {
		return err
	}
	defer snd.Close(ctx)
	body := bytes.Repeat([]byte("x"), size)
	for sent := 0; sent < n; {
		batch, err := snd.NewMessageBatch(ctx, nil)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			time.Sleep(200 * time.Millisecond)
			continue
		}
		k := 0
		for ; sent+k < n; k++ {
			if err := batch.AddMessage(&azservicebus.Message{Body: body}, nil); err != nil {
				if errors.Is(err, azservicebus.ErrMessageTooLarge) && k > 0 {
					break
				}
				return err
			}
		}
		if err := snd.SendMessageBatch(ctx, batch, nil); err != nil {
			return fmt.Errorf("send to %s after %d: %w", queue, sent, err)
		}
		sent += k
	}
	return nil
}
