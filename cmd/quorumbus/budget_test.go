package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/placement/sas"
)

// TestOneBudgetAcrossProcesses: a `quorumbus frontend` and a `quorumbus
// gateway`, each given the namespace's -throttle-credits and joined to
// the storage nodes' gossip, find each other there and enforce shares
// that add up to the budget (the gateway a tenth, the front-end the
// rest), and so, both driven past their shares at once for a few
// seconds, admit no more than the budget a second between them: AMQP
// sends at 1 credit, admin requests at 10. Two budgets, one per kind of
// process, would admit about twice as much.
func TestOneBudgetAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	_, grpcAddrs, gossipAddrs := startStorageProcesses(t, bin, dir)
	rules := filepath.Join(dir, "rules.json")
	if err := cluster.WriteRulesConfig(rules, sas.DevRule()); err != nil {
		t.Fatal(err)
	}
	const budget = 100
	own := freeAddrs(t, 5) // AMQP, the front-end's HTTP, the gateway's HTTP, and their gossip
	amqpAddr, feHTTP, gwHTTP := own[0], own[1], own[2]
	join := strings.Join(gossipAddrs, ",")
	startProcess(t, bin, "frontend", "-plain-cluster", "-amqp-addr", amqpAddr, "-http-addr", feHTTP, "-placement", strings.Join(grpcAddrs, ","),
		"-sas-rules", rules, "-throttle-credits", strconv.Itoa(budget), "-id", "fe", "-join", join, "-gossip-addr", own[3], "-log-level", "error")
	startProcess(t, bin, "gateway", "-plain-cluster", "-http-addr", gwHTTP, "-placement", strings.Join(grpcAddrs, ","),
		"-sas-rules", rules, "-throttle-credits", strconv.Itoa(budget), "-id", "gw", "-join", join, "-gossip-addr", own[4], "-log-level", "error")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Each finds the other in the gossip: the gateway's part is a tenth.
	waitCredits(t, ctx, feHTTP, budget*9/10)
	waitCredits(t, ctx, gwHTTP, budget/10)

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := cluster.CreateQueues(ctx, grpcAddrs, nil, []cluster.QueueSpec{{Name: "budget"}}, quiet); err != nil {
		t.Fatal(err)
	}
	conn := dialUntil(t, ctx, amqpAddr)
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd := senderUntil(t, ctx, sess, "budget")
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	ac, err := admin.NewClientFromConnectionString(
		fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s", gwHTTP, sas.DevKeyName, sas.DevKey),
		&admin.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: insecure, Retry: policy.RetryOptions{MaxRetries: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	// Both answer before the measured seconds (the queue is known to the
	// gateway's catalog reads too).
	for {
		if _, err := ac.GetQueue(ctx, "budget", nil); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the gateway never answered: %v", ctx.Err())
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Eight senders and four admin clients, as fast as they are
	// answered, for a few seconds.
	const window = 5 * time.Second
	var sent, sendsRefused, requests, requestsRefused atomic.Int64
	var unexpected atomic.Value
	stop := time.Now().Add(window)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				err := snd.Send(ctx, goamqp.NewMessage([]byte("m")), nil)
				var ae *goamqp.Error
				switch {
				case err == nil:
					sent.Add(1)
				case errors.As(err, &ae) && ae.Condition == "com.microsoft:server-busy":
					sendsRefused.Add(1)
				default:
					unexpected.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	for range 4 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				_, err := ac.GetQueue(ctx, "budget", nil)
				var re *azcore.ResponseError
				switch {
				case err == nil:
					requests.Add(1)
				case errors.As(err, &re) && re.StatusCode == http.StatusServiceUnavailable:
					requestsRefused.Add(1)
				default:
					unexpected.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := unexpected.Load().(error); err != nil {
		t.Fatalf("neither admitted nor throttled: %v", err)
	}
	spent := sent.Load() + 10*requests.Load()
	t.Logf("in %v: %d messages sent (%d refused), %d admin requests answered (%d refused): %d credits, budget %d a second",
		window, sent.Load(), sendsRefused.Load(), requests.Load(), requestsRefused.Load(), spent, budget)
	if sendsRefused.Load() == 0 || requestsRefused.Load() == 0 {
		t.Fatalf("not both driven past their shares (%d sends, %d admin requests refused): the test proves nothing",
			sendsRefused.Load(), requestsRefused.Load())
	}
	// The window's seconds, and the one it started inside of, whose
	// credits were all there at its start.
	if limit := int64(budget * (window/time.Second + 1)); spent > limit {
		t.Fatalf("the front-end and the gateway admitted %d credits in %v, more than the budget allows (%d)", spent, window, limit)
	}
}

// waitCredits waits until the process serving /metrics at addr admits
// want credits a second (quorumbus_throttle_credits_per_second).
func waitCredits(t *testing.T, ctx context.Context, addr string, want int) {
	t.Helper()
	got := "nothing"
	for {
		if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), "quorumbus_throttle_credits_per_second "); ok {
					got = v
				}
			}
			resp.Body.Close()
			if got == strconv.Itoa(want) {
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("%s admits %s credits a second, want %d", addr, got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
