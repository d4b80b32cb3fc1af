package main

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// nodePorts are the addresses a storage node process listens on.
type nodePorts struct{ grpc, gossip, http string }

// startLateNode starts a storage node that joins a running cluster,
// on ports picked as it starts, and waits until its /healthz answers.
//
// A port freeAddrs picked at the start of a test is free only then: any
// process on the machine may bind it before a node that joins minutes
// later does, and that node then exits at start. (Under make test, the
// fourth node of TestGrowAndDrainUnderLoad found its HTTP port taken;
// gossip had announced it, its moves were aborted once it was gone, and
// the test waited three minutes for replicas on a node that was not
// running.) A node that joins later needs no address known in advance,
// so its ports are picked when it starts, and a node that exits before
// it is healthy is started again on other ports, up to three times.
func startLateNode(t *testing.T, bin string, args func(nodePorts) []string) (*process, nodePorts) {
	t.Helper()
	for try := 1; ; try++ {
		addrs := freeAddrs(t, 3)
		ports := nodePorts{grpc: addrs[0], gossip: addrs[1], http: addrs[2]}
		p := startProcess(t, bin, args(ports)...)
		err := awaitHealthy(p, ports.http, time.Minute)
		if err == nil {
			return p, ports
		}
		if try == 3 {
			t.Fatalf("a node that joins did not start three times; the last on %+v: %v", ports, err)
		}
		t.Logf("a node that joins did not start on %+v (%v); starting it on other ports", ports, err)
	}
}

// awaitHealthy waits until the process's /healthz at httpAddr answers 200,
// and reports why not if the process exits first or wait passes (then it
// kills the process).
func awaitHealthy(p *process, httpAddr string, wait time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(wait)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("exited: %v", p.cmd.ProcessState)
		default:
		}
		resp, err := client.Get("http://" + httpAddr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/healthz: %s", resp.Status)
		}
		if time.Now().After(deadline) {
			p.kill9()
			return fmt.Errorf("not healthy after %v: %v", wait, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}
