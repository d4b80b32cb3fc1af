// Package report writes what a chaos run leaves behind for an engineer:
// the history, the fault timeline, each checker's verdict and a summary,
// in one directory.
package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/tests/jepsen/checker"
	"github.com/quorumbus/quorumbus/tests/jepsen/history"
	"github.com/quorumbus/quorumbus/tests/jepsen/nemesis"
)

// Run is everything a report says about one run.
type Run struct {
	Seed     uint64           `json:"seed"`
	Profile  string           `json:"profile"`
	Network  string           `json:"network"`
	Duration time.Duration    `json:"duration_ns"`
	Summary  checker.Summary  `json:"summary"`
	Results  []checker.Result `json:"results"`
	Faults   []nemesis.Fault  `json:"-"`
	History  []history.Op     `json:"-"`
	// HistoryStreamed: history.jsonl was written as the run went
	// (history.Recorder), so Write leaves it alone.
	HistoryStreamed bool              `json:"-"`
	Problems        []string          `json:"problems,omitempty"` // harness findings: crashes, failed restarts, a drain that ran out
	Counts          map[string]int    `json:"faults_by_kind"`
	Stalls          []Stall           `json:"stalls"`
	Extra           map[string]string `json:"extra,omitempty"`
	// CatchUps: after each healed partition, how long until every
	// replica had applied what the leader had committed at the heal.
	CatchUps []CatchUp `json:"catch_ups,omitempty"`
	// Digests: the last round of replica digests after the drain
	// (checker.Converged's input).
	Digests []checker.DigestSample `json:"digests,omitempty"`
}

// Valid says whether every checker passed and the harness saw no problem.
func (r *Run) Valid() bool {
	for _, res := range r.Results {
		if !res.Valid {
			return false
		}
	}
	return len(r.Problems) == 0
}

// Write puts history.jsonl, faults.jsonl, results.json, summary.txt and
// timeline.svg into dir.
func Write(dir string, r *Run) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	r.measure()
	if !r.HistoryStreamed {
		f, err := os.Create(filepath.Join(dir, "history.jsonl"))
		if err != nil {
			return err
		}
		if err := history.WriteJSONL(f, r.History); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	var faults strings.Builder
	enc := json.NewEncoder(&faults)
	for _, fl := range r.Faults {
		enc.Encode(fl)
	}
	results, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	files := map[string]string{
		"faults.jsonl": faults.String(),
		"results.json": string(results) + "\n",
		"summary.txt":  Summary(r),
		"timeline.svg": Timeline(r.History, r.Faults),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// measure fills the figures derived from the history and faults.
func (r *Run) measure() {
	r.Counts = map[string]int{}
	for _, f := range r.Faults {
		r.Counts[f.Kind]++
	}
	r.Stalls = Stalls(r.History, r.Faults)
}

// Summary is the text a person reads first, and the test prints.
func Summary(r *Run) string {
	r.measure()
	var b strings.Builder
	verdict := "VALID"
	if !r.Valid() {
		verdict = "INVALID"
	}
	s := r.Summary
	fmt.Fprintf(&b, "chaos run: %s (seed %d, profile %s, network %s, %v)\n", verdict, r.Seed, r.Profile, r.Network, r.Duration.Round(time.Second))
	fmt.Fprintf(&b, "operations: %d (sends %d ok, %d fail, %d info; %d deliveries of %d ids, %d redeliveries, %d info sends recovered; completes %d ok, %d fail, %d info; %d empty receives)\n",
		s.Ops, s.SendsOK, s.SendsFail, s.SendsInfo, s.Deliveries, s.Received, s.Redeliveries, s.Recovered,
		s.CompletesOK, s.CompletesFail, s.CompletesInfo, s.EmptyReceives)
	b.WriteString(EntityCounts(r.History))
	fmt.Fprintf(&b, "faults: %d", len(r.Faults))
	for _, k := range sortedKeys(r.Counts) {
		fmt.Fprintf(&b, ", %s %d", k, r.Counts[k])
	}
	b.WriteString("\n")
	b.WriteString(StallSummary(r.Stalls))
	b.WriteString(Figures(r.Stalls, r.CatchUps))
	violations := 0
	for _, res := range r.Results {
		violations += len(res.Violations)
	}
	fmt.Fprintf(&b, "violations: %d\n", violations)
	for _, k := range sortedKeys(r.Extra) {
		fmt.Fprintf(&b, "%s: %s\n", k, r.Extra[k])
	}
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "PROBLEM: %s\n", p)
	}
	for _, res := range r.Results {
		mark := "ok  "
		if !res.Valid {
			mark = "FAIL"
		}
		fmt.Fprintf(&b, "%s %-16s %s\n", mark, res.Name, res.Property)
		for _, v := range res.Violations {
			fmt.Fprintf(&b, "       %s\n", v.Msg)
			for _, op := range v.Ops {
				fmt.Fprintf(&b, "         %s\n", op)
			}
		}
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// ReadFaults reads the faults.jsonl that Write put in dir; a report
// without one had no faults.
func ReadFaults(dir string) ([]nemesis.Fault, error) {
	path := filepath.Join(dir, "faults.jsonl")
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []nemesis.Fault
	dec := json.NewDecoder(bytes.NewReader(data))
	for dec.More() {
		var f nemesis.Fault
		if err := dec.Decode(&f); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, f)
	}
	return out, nil
}
