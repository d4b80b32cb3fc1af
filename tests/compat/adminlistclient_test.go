package compat

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/cmd/quorumbus/loadtool"
	"github.com/quorumbus/quorumbus/placement/sas"
)

// A user's admin client runs in a process of its own. In the benchmark's
// process it shares the heap, the garbage collector and the scheduler
// with the dev cluster, and its CPU cannot be told from the cluster's. So
// BenchmarkAdminListAndScrape also lists from a second process: the
// helper TestAdminListClientProcess, in this test binary run again, with
// the Go admin client as KEDA's scaler builds it (no options; the dev
// certificate trusted through SSL_CERT_FILE, as keda_test.go does).

// listClientEnv names the environment variable that holds the helper's
// listClientJob as JSON.
const listClientEnv = "QUORUMBUS_ADMIN_LIST_CLIENT"

// listClientJob is what the helper is to do: list Entities queues with
// their runtime properties, pages of PageSize, Reps times.
type listClientJob struct {
	Conn     string // the admin client's connection string
	Entities int
	PageSize int32
	Reps     int
	// Profile, when set, is the file the helper writes its CPU profile
	// of the Reps lists to.
	Profile string
}

// listClientResult is what the helper measured around its lists alone,
// without its own start: wall time and its CPU (user and system).
type listClientResult struct {
	Wall, CPU time.Duration
}

// TestAdminListClientProcess is the helper: it runs only when
// listFromOwnProcess starts it. It makes one list unmeasured (the TLS
// handshake and the client's first allocations are a start, not a
// list), says ready, waits for a line on stdin (the parent starts its
// own measure), makes the job's lists and prints a listClientResult as
// JSON.
func TestAdminListClientProcess(t *testing.T) {
	spec := os.Getenv(listClientEnv)
	if spec == "" {
		t.Skip("run by BenchmarkAdminListAndScrape")
	}
	var job listClientJob
	if err := json.Unmarshal([]byte(spec), &job); err != nil {
		t.Fatal(err)
	}
	ac, err := admin.NewClientFromConnectionString(job.Conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	list := func() {
		got := 0
		p := ac.NewListQueuesRuntimePropertiesPager(&admin.ListQueuesRuntimePropertiesOptions{MaxPageSize: job.PageSize})
		for p.More() {
			page, err := p.NextPage(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got += len(page.QueueRuntimeProperties)
		}
		if got != job.Entities {
			t.Fatalf("listed %d queues, want %d", got, job.Entities)
		}
	}
	list()
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if job.Profile != "" {
		f, err := os.Create(job.Profile)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	start, cpu := time.Now(), loadtool.SelfCPU()
	for range job.Reps {
		list()
	}
	if err := json.NewEncoder(os.Stdout).Encode(listClientResult{Wall: time.Since(start), CPU: loadtool.SelfCPU() - cpu}); err != nil {
		t.Fatal(err)
	}
}

// listFromOwnProcess starts the client process on c for reps lists of n
// queues in pages of pageSize; once the process has made its first,
// unmeasured list, it calls measure, lets the process list, and returns
// what the process measured after calling measure's result.
func listFromOwnProcess(b *testing.B, c *cluster.Dev, n int, pageSize int32, reps int, measure func() func()) listClientResult {
	b.Helper()
	job := listClientJob{
		Conn:     fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s", c.Admin.Addr(), sas.DevKeyName, sas.DevKey),
		Entities: n, PageSize: pageSize, Reps: reps,
	}
	if dir := os.Getenv("QUORUMBUS_BENCH_PROFILE"); dir != "" {
		job.Profile = filepath.Join(dir, fmt.Sprintf("list-client-process-pages-of-%d.pprof", pageSize))
	}
	spec, err := json.Marshal(job)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAdminListClientProcess$")
	cmd.Env = append(os.Environ(), listClientEnv+"="+string(spec), "SSL_CERT_FILE="+c.AdminCert)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	out := bufio.NewReader(stdout)
	// failed reports what the helper said (a test's failure goes to
	// stdout) after line.
	failed := func(line string, err error) {
		stdin.Close()
		rest, _ := io.ReadAll(out)
		cmd.Wait()
		b.Fatalf("list client process: %v\n%s%s%s", err, line, rest, stderr.Bytes())
	}
	if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
		failed(line, err)
	}
	done := measure()
	fmt.Fprintln(stdin, "go")
	line, err := out.ReadString('\n')
	done()
	var res listClientResult
	if err == nil {
		err = json.Unmarshal([]byte(line), &res)
	}
	if err != nil {
		failed(line, err)
	}
	stdin.Close()
	io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		b.Fatalf("list client process: %v\n%s", err, stderr.Bytes())
	}
	return res
}
