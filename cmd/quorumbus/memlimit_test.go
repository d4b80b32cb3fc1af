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
