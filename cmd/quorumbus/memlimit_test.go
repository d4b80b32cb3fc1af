package main

import (
	"log/slog"
	"math"
	"runtime/debug"
	"testing"
)

func TestApplyMemoryLimit(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	before := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(before)
	log := slog.New(slog.DiscardHandler)
	for _, tt := range []struct {
		mb, budget, want int64
	}{
		{0, 2000, 2000 << 20},
		{512, 2000, 512 << 20},
		{-1, 2000, math.MaxInt64},
	} {
		debug.SetMemoryLimit(math.MaxInt64)
		if err := applyMemoryLimit(tt.mb, tt.budget, log); err != nil {
			t.Fatal(err)
		}
		if got := debug.SetMemoryLimit(-1); got != tt.want {
			t.Errorf("-memory-limit-mb %d with a budget of %d MiB: limit %d, want %d", tt.mb, tt.budget, got, tt.want)
		}
	}
	if err := applyMemoryLimit(-2, 1, log); err == nil {
		t.Error("-memory-limit-mb -2 accepted")
	}
	if got := storageBudgetMiB(9, 32); got != 9*(3*32+groupMiB) {
		t.Errorf("storage budget %d MiB", got)
	}
}

func TestReplicasPerNode(t *testing.T) {
	for _, tt := range []struct {
		name                         string
		groups, r, nodes, perNodeCap int
		want                         int
	}{
		{"node: every group of -groups", 3, 1, 1, 0, 3},
		{"node: the cap", 3, 1, 1, 8, 8},
		{"node: -groups above the cap", 10, 1, 1, 8, 10},
		{"dev: three nodes, every group on each", 3, 3, 3, 0, 3},
		{"dev: three nodes, the cap", 3, 3, 3, 8, 8},
		{"five nodes share -groups' replicas", 5, 3, 5, 0, 3},
		{"one node", 3, 1, 1, 8, 8},
	} {
		if got := replicasPerNode(tt.groups, tt.r, tt.nodes, tt.perNodeCap); got != tt.want {
			t.Errorf("%s: replicasPerNode(%d, %d, %d, %d) = %d, want %d", tt.name, tt.groups, tt.r, tt.nodes, tt.perNodeCap, got, tt.want)
		}
	}
}
