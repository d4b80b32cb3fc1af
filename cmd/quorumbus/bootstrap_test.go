package main

import (
	"io"
	"log/slog"
	"testing"
)

// TestBootstrapFor: a node named in -bootstrap bootstraps with the whole
// list; one the list does not name (a StatefulSet pod past the first
// three) joins with none, so every pod can be given the same arguments.
func TestBootstrapFor(t *testing.T) {
	servers, err := parseServers("qb-0=qb-0.h:7101,qb-1=qb-1.h:7101,qb-2=qb-2.h:7101")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		id   string
		want int
	}{{"qb-0", 3}, {"qb-2", 3}, {"qb-3", 0}, {"qb-10", 0}} {
		if got := bootstrapFor(tc.id, servers, log); len(got) != tc.want {
			t.Errorf("bootstrapFor(%s): %d servers, want %d", tc.id, len(got), tc.want)
		}
	}
	if got := bootstrapFor("qb-0", nil, log); got != nil {
		t.Errorf("no -bootstrap: got %v, want none", got)
	}
}
