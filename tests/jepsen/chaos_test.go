package jepsen

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/tests/jepsen/checker"
	"github.com/quorumbus/quorumbus/tests/jepsen/cluster"
	"github.com/quorumbus/quorumbus/tests/jepsen/history"
	"github.com/quorumbus/quorumbus/tests/jepsen/nemesis"
	"github.com/quorumbus/quorumbus/tests/jepsen/report"
	"github.com/quorumbus/quorumbus/tests/jepsen/workload"
)

// profile is the shape of a run. CHAOS_PROFILE picks one; CHAOS_FAULTS
// and CHAOS_RATE override its figures.
type profile struct {
	faults int
	// duration, when set, runs faults until it has passed instead of a
	// count (the soak profile; CHAOS_DURATION overrides it).
	duration           time.Duration
	holdMin, holdMax   time.Duration
	quietMin, quietMax time.Duration
	rate               float64 // sends per second, all senders together
	// featureScale multiplies the feature workloads' rates
	// (startFeatures); 0 means 1.
	featureScale float64
}

var profiles = map[string]profile{
	// ci: what `make chaos` runs; about seven minutes of faults (a drain
	// or a clock skew's restarts take longer than a hold), under ten
	// minutes in all on two cores.
	"ci": {faults: 32, holdMin: 3 * time.Second, holdMax: 8 * time.Second,
		quietMin: 2 * time.Second, quietMax: 5 * time.Second, rate: 150},
	// soak: hours of faults for the availability figures
	// (docs/reliability.md); CHAOS_DURATION sets how long. Its rates keep
	// the history under the recorder's bound (history.DefaultMaxOps) for
	// about five hours: at the queue's 60/s and the features' full rates
	// every workload together recorded 47,000 entries a minute, and a
	// two-hour soak overflowed after 1 h 46 min (its drain went
	// unrecorded, so every message received after that looked lost); at
	// 30/s and a quarter, about 17,000. A quarter also keeps the renew
	// workload's sends (a message a second at full rate) under what its
	// receivers, which hold each message through renewals, take.
	"soak": {duration: 2 * time.Hour, holdMin: 3 * time.Second, holdMax: 10 * time.Second,
		quietMin: 3 * time.Second, quietMax: 10 * time.Second, rate: 30, featureScale: 0.25},
	// short: a minute, for working on the harness.
	"short": {faults: 6, holdMin: 2 * time.Second, holdMax: 5 * time.Second,
		quietMin: 2 * time.Second, quietMax: 3 * time.Second, rate: 100},
}

// lockDuration is the queue's: short, so that the messages of receives
// a fault cut off come back within the drain (they stay locked to
// nobody until then).
const lockDuration = 10 * time.Second

// TestChaos runs the queue workload against three storage nodes and a
// front-end while the nemesis kills, pauses and partitions nodes; then it
// heals everything, drains the queue and checks the history. The report
// goes to CHAOS_REPORT_DIR (default reports/<time>-seed<seed>).
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of processes for minutes")
	}
	name := envOr("CHAOS_PROFILE", "short")
	prof, ok := profiles[name]
	if !ok {
		t.Fatalf("CHAOS_PROFILE=%s: no such profile", name)
	}
	if v := os.Getenv("CHAOS_FAULTS"); v != "" {
		prof.faults = mustAtoi(t, "CHAOS_FAULTS", v)
	}
	if v := os.Getenv("CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("CHAOS_DURATION=%s: %v", v, err)
		}
		prof.duration = d
	}
	if prof.duration > 0 {
		// Enough faults to fill the duration, which ends the run first;
		// the plan is drawn up front, so no more than that.
		prof.faults = int(prof.duration/(prof.quietMin+prof.holdMin)) + 1
	}
	if v := os.Getenv("CHAOS_RATE"); v != "" {
		prof.rate = float64(mustAtoi(t, "CHAOS_RATE", v))
	}
	seed := newSeed(t)
	t.Logf("seed %d (replay: CHAOS_SEED=%d CHAOS_PROFILE=%s make chaos)", seed, seed, name)
	dir := os.Getenv("CHAOS_REPORT_DIR")
	if dir == "" {
		dir = filepath.Join("reports", fmt.Sprintf("%s-seed%d", time.Now().UTC().Format("20060102-150405"), seed))
	}
	dir, _ = filepath.Abs(dir)
	t.Logf("report: %s", dir)

	kinds := []string{nemesis.KillLeader, nemesis.KillNode, nemesis.PauseLeader, nemesis.PauseNode, nemesis.KillFrontend, nemesis.KillMajority, nemesis.TransferLeader,
		nemesis.IsolateLeader, nemesis.IsolateNode, nemesis.PartitionBridge, nemesis.OneWayLeaderOut, nemesis.OneWayLeaderIn, nemesis.OneWayPair, nemesis.LossyPair,
		nemesis.Delay, nemesis.LossLike, nemesis.SlowLink, nemesis.DeafLeader,
		nemesis.CrashLeaderMachine, nemesis.CrashMajorityMachines, nemesis.AddNode, nemesis.DrainNode, nemesis.ClockSkew}
	explicit := os.Getenv("CHAOS_KINDS") != ""
	if explicit {
		kinds = strings.Split(os.Getenv("CHAOS_KINDS"), ",")
	}
	var opts cluster.Options
	for _, k := range kinds {
		for _, need := range nemesis.Needs(k) {
			switch need {
			case "proxies":
				opts.Proxies = true
			case "machines":
				opts.SimulateMachines = true
			case "spares":
				opts.Spares = 2
			}
		}
	}
	netw := network(t, cluster.Members(opts.Spares))
	// Kinds this machine cannot inject: dropped from the default list
	// (and said so), fatal when asked for by name.
	var cannot []string
	kinds = slices.DeleteFunc(kinds, func(k string) bool {
		for _, need := range nemesis.Needs(k) {
			var why error
			switch {
			case need == "netns" && netw.Mode() != "netns":
				why = fmt.Errorf("network %s", netw.Mode())
			case need == "iptables" && netw.Mode() == "netns":
				why = cluster.IptablesAvailable()
			case need == "iptables":
				why = fmt.Errorf("network %s", netw.Mode())
			}
			if why != nil {
				cannot = append(cannot, fmt.Sprintf("%s (%v)", k, why))
				return true
			}
		}
		return false
	})
	if len(cannot) > 0 {
		if explicit {
			t.Fatalf("CHAOS_KINDS: cannot inject %s", strings.Join(cannot, ", "))
		}
		t.Logf("fault kinds left out on this machine: %s", strings.Join(cannot, ", "))
	}
	if len(kinds) == 0 {
		t.Fatal("no fault kind to draw from")
	}
	t.Logf("fault kinds: %s", strings.Join(kinds, ","))
	bin, err := cluster.Build(filepath.Join("..", ".."), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := cluster.New(netw, bin, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateQueue(ctx, "jepsen", "-lock-duration", lockDuration.String()); err != nil {
		t.Fatal(err)
	}
	group, err := c.QueueGroup(ctx, "jepsen")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CreateQueue(ctx, dedupQueue, "-lock-duration", lockDuration.String(), "-duplicate-detection", "-duplicate-detection-window", dedupWindow.String()); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateQueue(ctx, schedQueue, "-lock-duration", lockDuration.String()); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateQueue(ctx, renewQueue, "-lock-duration", renewLock.String()); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateQueue(ctx, sessionQueue, "-lock-duration", lockDuration.String(), "-requires-session"); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateQueue(ctx, settleQueue, "-lock-duration", lockDuration.String(), "-max-delivery-count", strconv.Itoa(settleMaxDeliveries)); err != nil {
		t.Fatal(err)
	}
	pl := workload.Placement{Addrs: c.GRPC, Dial: c.Net.DialContext}
	if err := pl.Create(ctx, workload.TopicEntities(topicName, lockDuration)...); err != nil {
		t.Fatal(err)
	}
	// Every entity's groups, for the convergence check (one with
	// -groups 1, which the nemesis aims at).
	groups := []uint64{checker.MetaGroup, group}
	for _, e := range []string{dedupQueue, schedQueue, renewQueue, sessionQueue, topicName, settleQueue} {
		if g, err := c.QueueGroup(ctx, e); err == nil && !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	cancel()

	// The history streams to disk as it is recorded: a run killed before
	// its report still leaves it.
	hf, err := os.Create(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer hf.Close()
	rec := history.NewRecorder(hf)
	start := time.Now()
	q := workload.Start(context.Background(), workload.Config{
		Dial: c.DialAMQP, Queue: "jepsen", Senders: 4, Receivers: 4,
		SendRate: prof.rate, OpTimeout: 10 * time.Second, Rec: rec,
	})
	runners := append([]workload.Runner{q}, startFeatures(c, rec, seed, cmp.Or(prof.featureScale, 1))...)
	meta := workload.StartMetadata(context.Background(), workload.MetadataConfig{Placement: pl, Rec: rec, Clients: 3,
		Names: workload.MetadataNames(3), Interval: 300 * time.Millisecond, OpTimeout: 10 * time.Second, Seed: seed,
		Generation: 2 * time.Minute})
	topicMeta := workload.StartTopicMetadata(context.Background(), workload.MetadataConfig{Placement: pl, Rec: rec, Clients: 2,
		Names: workload.TopicMetadataNames(2), Interval: 400 * time.Millisecond, OpTimeout: 10 * time.Second, Seed: seed,
		Generation: 2 * time.Minute})
	watch := startWatch(c, group, rec.Since, 250*time.Millisecond)
	nem := nemesis.New(nemesis.Config{Cluster: c, Group: group, Seed: seed, Kinds: kinds,
		HoldMin: prof.holdMin, HoldMax: prof.holdMax, QuietMin: prof.quietMin, QuietMax: prof.quietMax,
		Clock: rec.Since, Log: t.Logf})
	nctx := context.Background()
	if prof.duration > 0 {
		var ncancel context.CancelFunc
		nctx, ncancel = context.WithTimeout(nctx, prof.duration)
		defer ncancel()
		t.Logf("faults for %v", prof.duration)
	}
	nem.Run(nctx, prof.faults)

	// Heal, wait until the cluster is whole and ready, then stop sending
	// and drain with no fault in the way.
	var problems []string
	if err := nemesis.HealAll(c); err != nil {
		problems = append(problems, "heal: "+err.Error())
	}
	if err := nem.Err(); err != nil {
		problems = append(problems, "nemesis: "+err.Error())
	}
	for _, p := range append(append([]*cluster.Process(nil), c.Nodes...), c.Frontend) {
		if n := p.Crashes(); n > 0 {
			problems = append(problems, fmt.Sprintf("%s exited by itself %d times (see logs/%s.log)", p.Name, n, p.Name))
		}
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 60*time.Second)
	if err := c.WaitAllReady(rctx); err != nil {
		problems = append(problems, fmt.Sprintf("not ready 60 s after healing: %v", err))
	}
	rcancel()
	time.Sleep(3 * time.Second) // sends resume against the healed cluster before they stop
	meta.Stop()
	topicMeta.Stop()
	for _, r := range runners {
		r.StopSends()
	}
	catchUps := report.CatchUps(watch.Stop(), nem.Faults(), nemesis.IsolateLeader, nemesis.IsolateNode, nemesis.PartitionBridge)
	// The workloads drain side by side, each until it has what it
	// expects and then a quiet period longer than its locks.
	dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	var dwg sync.WaitGroup
	for _, r := range runners {
		t.Logf("drain %s: %d acknowledged sends not received yet", r.Name(), r.Missing())
		dwg.Add(1)
		go func() {
			defer dwg.Done()
			if missing := r.Drain(dctx, lockDuration+2*time.Second); missing > 0 {
				t.Logf("drain %s ended with %d acknowledged sends never received", r.Name(), missing)
			}
		}()
	}
	dwg.Wait()
	dcancel()
	// With the clients quiet, every replica of every group must reach
	// one applied index with one digest.
	gctx, gcancel := context.WithTimeout(context.Background(), time.Minute)
	digestStart := time.Now()
	sums := digests(gctx, c, groups)
	gcancel()
	t.Logf("digests of %d groups compared after %v", len(groups), time.Since(digestStart).Round(time.Millisecond))

	if n := rec.Overflowed(); n > 0 {
		problems = append(problems, fmt.Sprintf("the history overflowed: %d entries past %d dropped (a client looping?)", n, rec.MaxOps))
	}
	if err := rec.Flush(); err != nil {
		problems = append(problems, "writing history.jsonl: "+err.Error())
	}
	ops := rec.Ops()
	results := append(checker.Run(checker.Queue, history.Select(ops, "")), checker.RunSuites(featureSuites(nem.Faults()), ops)...)
	results = append(results, checker.Run([]checker.Checker{{Name: "converged", Property: "P16: after healing, every replica of every group has one digest at one applied index", Check: func([]history.Op) []checker.Violation { return checker.Converged(sums) }}}, nil)...)
	run := &report.Run{Seed: seed, Profile: name, Network: netw.Mode(), Duration: time.Since(start),
		Summary: checker.Summarize(history.Select(ops, "")), Results: results,
		Faults: nem.Faults(), History: ops, HistoryStreamed: true, Problems: problems,
		Extra:    map[string]string{"harness peak RSS": peakRSS(), "operations of all workloads": strconv.Itoa(len(history.Pairs(ops)))},
		CatchUps: catchUps, Digests: sums}
	for _, r := range results {
		if r.Name == "catalog/linearizable" && !r.Valid {
			if err := checker.VisualizeCatalog(history.Select(ops, workload.MetadataEntity), filepath.Join(dir, "catalog.html")); err != nil {
				t.Logf("catalog.html: %v", err)
			}
		}
	}
	if err := report.Write(dir, run); err != nil {
		t.Errorf("writing the report: %v", err)
	}
	t.Log("\n" + report.Summary(run))
	if !run.Valid() {
		t.Fatalf("chaos run INVALID; replay with CHAOS_SEED=%d CHAOS_PROFILE=%s; report in %s", seed, name, dir)
	}
	// The data directories are large and only needed to study a failure;
	// the processes go first, or they would log the files vanishing.
	c.Stop()
	os.RemoveAll(filepath.Join(dir, "data"))
}

// network is netns when the machine allows it, loopback otherwise (or
// with CHAOS_NETWORK=loopback), saying why.
func network(t *testing.T, members int) cluster.Network {
	if os.Getenv("CHAOS_NETWORK") == "loopback" {
		t.Log("network: loopback (CHAOS_NETWORK=loopback): no partitions")
		return cluster.Loopback{}
	}
	if err := cluster.NetnsAvailable(); err != nil {
		t.Logf("network: loopback, no partitions: network namespaces unavailable (%v)", err)
		return cluster.Loopback{}
	}
	if err := cluster.ReapStale(); err != nil {
		t.Logf("deleting namespaces of earlier runs: %v", err)
	}
	n, err := cluster.NewNetns(members)
	if err != nil {
		t.Fatalf("network namespaces: %v", err)
	}
	// Registered before the cluster's Stop, so it runs after it: a
	// namespace goes only once its processes have.
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("deleting the run's namespaces: %v", err)
		}
	})
	t.Log("network: netns (a namespace per process, partitions by blackhole routes)")
	return n
}

func newSeed(t *testing.T) uint64 {
	if v := os.Getenv("CHAOS_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%s: %v", v, err)
		}
		return s
	}
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) >> 1 // fits an int64 too, for tools that parse it
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func mustAtoi(t *testing.T, k, v string) int {
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%s: %v", k, v, err)
	}
	return n
}

// TestRecheck checks a saved history again (CHAOS_HISTORY=path to a
// report's history.jsonl), e.g. after a checker changed: no cluster.
func TestRecheck(t *testing.T) {
	path := os.Getenv("CHAOS_HISTORY")
	if path == "" {
		t.Skip("CHAOS_HISTORY names no history.jsonl to check")
	}
	ops, err := history.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", checker.Summarize(ops))
	faults, err := report.ReadFaults(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	results := append(checker.Run(checker.Queue, history.Select(ops, "")), checker.RunSuites(featureSuites(faults), ops)...)
	for _, r := range results {
		if !r.Valid {
			t.Errorf("%s: %s", r.Name, r.Property)
			for _, v := range r.Violations {
				t.Errorf("  %s: %v", v.Msg, v.Ops)
			}
		}
	}
}

// peakRSS reads the test process's peak resident memory (VmHWM), for
// the summary: the harness shares its machine.
func peakRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
