package nemesis

import (
	"reflect"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/tests/jepsen/cluster"
)

func TestPlanReplaysFromTheSeed(t *testing.T) {
	cfg := Config{Seed: 42, Kinds: []string{KillLeader, PauseNode, PartitionBridge},
		HoldMin: 3 * time.Second, HoldMax: 8 * time.Second, QuietMin: 2 * time.Second, QuietMax: 5 * time.Second}
	a, b := Plan(cfg, 200), Plan(cfg, 200)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed planned two different schedules")
	}
	cfg.Seed = 43
	if reflect.DeepEqual(a, Plan(cfg, 200)) {
		t.Fatal("seeds 42 and 43 planned the same schedule")
	}
	kinds := map[string]int{}
	for _, s := range a {
		kinds[s.Kind]++
		if s.Hold < cfg.HoldMin || s.Hold >= cfg.HoldMax || s.Quiet < cfg.QuietMin || s.Quiet >= cfg.QuietMax {
			t.Errorf("step %+v outside the configured bounds", s)
		}
		if s.Pick < 0 || s.Pick >= cluster.Nodes || s.Other < 0 || s.Other >= cluster.Nodes || s.Other == s.Pick {
			t.Errorf("step %+v: bad nodes", s)
		}
	}
	if len(kinds) != len(cfg.Kinds) {
		t.Errorf("200 steps drew kinds %v, not every one of %v", kinds, cfg.Kinds)
	}
}

func TestPlanPrefixIsStable(t *testing.T) {
	// A run cut short (CHAOS_FAULTS smaller) replays the beginning of the
	// longer run with the same seed.
	cfg := Config{Seed: 7, Kinds: []string{KillNode, IsolateNode}, HoldMin: time.Second, HoldMax: 2 * time.Second}
	if long, short := Plan(cfg, 40), Plan(cfg, 10); !reflect.DeepEqual(long[:10], short) {
		t.Fatal("a shorter plan is not a prefix of a longer one")
	}
}
