package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestTenThousandEntities is `make soak-entities`: three node processes
// with 10,000 queues, 100 of them of 16 partitions (the namespace's
// limits), reporting each node's memory and the time a restart of the
// whole cluster takes until every node is ready again. It runs only with
// QUORUMBUS_ENTITIES=1.
func TestTenThousandEntities(t *testing.T) {
	if os.Getenv("QUORUMBUS_ENTITIES") == "" {
		t.Skip("QUORUMBUS_ENTITIES=1 (make soak-entities) runs it")
	}
	const plain, partitioned = 9_900, 100
	bin := buildBinary(t)
	dir := t.TempDir()
	grpcAddrs := freeAddrs(t, 3)
	gossipAddrs := freeAddrs(t, 3)
	httpAddrs := freeAddrs(t, 3)
	var boot []string
	for i := range 3 {
		boot = append(boot, fmt.Sprintf("n%d=%s", i+1, grpcAddrs[i]))
	}
	nodeArgs := func(i int) []string {
		return []string{"node", "-plain-cluster", "-id", fmt.Sprintf("n%d", i+1), "-data", filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			"-grpc-addr", grpcAddrs[i], "-gossip-addr", gossipAddrs[i], "-join", strings.Join(gossipAddrs, ","),
			"-http-addr", httpAddrs[i], "-bootstrap", strings.Join(boot, ","), "-log-level", "error"}
	}
	procs := make([]*process, 3)
	for i := range 3 {
		procs[i] = startProcess(t, bin, nodeArgs(i)...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	ready := func(what string) time.Duration {
		start := time.Now()
		for i := range 3 {
			for {
				resp, err := http.Get("http://" + httpAddrs[i] + "/readyz")
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						break
					}
				}
				if ctx.Err() != nil {
					t.Fatalf("%s: n%d never ready", what, i+1)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		return time.Since(start)
	}
	ready("start")

	client, closeFn, err := cluster.DialPlacement(grpcAddrs[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	start := time.Now()
	names := make(chan int)
	var wg sync.WaitGroup
	var failed sync.Once
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range names {
				props := &placementpb.QueueProperties{}
				if i < partitioned {
					props.PartitionCount = 16
				}
				for {
					cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
					_, err := client.CreateEntity(cctx, &placementpb.CreateEntityRequest{Name: "q" + strconv.Itoa(i), Properties: props})
					ccancel()
					if err == nil || cluster.IsAlreadyExists(err) {
						break
					}
					if ctx.Err() != nil {
						failed.Do(func() { t.Errorf("create q%d: %v", i, err) })
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	for i := range plain + partitioned {
		names <- i
	}
	close(names)
	wg.Wait()
	if t.Failed() {
		return
	}
	created := time.Since(start)
	rss := func() string {
		var out []string
		for i, p := range procs {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
			for _, line := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(line, "VmRSS:") {
					out = append(out, fmt.Sprintf("n%d %s", i+1, strings.Join(strings.Fields(line)[1:], " ")))
				}
			}
		}
		return strings.Join(out, ", ")
	}
	time.Sleep(5 * time.Second) // the partition tasks finish; memory settles
	t.Logf("%d entities (%d of 16 partitions) created in %v; RSS %s", plain+partitioned, partitioned, created.Round(time.Second), rss())

	for i := range 3 {
		procs[i].signal(syscall.SIGTERM)
		<-procs[i].done
	}
	for i := range 3 {
		procs[i] = startProcess(t, bin, nodeArgs(i)...)
	}
	took := ready("restart")
	time.Sleep(5 * time.Second)
	t.Logf("restart of all three nodes ready in %v; RSS %s", took.Round(100*time.Millisecond), rss())
}
