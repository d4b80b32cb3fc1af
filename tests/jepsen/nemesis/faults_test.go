package nemesis

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// TestLinkToxicsParse: every toxic a link fault adds is one toxiproxy
// accepts (a typo in a type or an attribute would fail the fault at run
// time, minutes into a chaos run), at both ends of its size.
func TestLinkToxicsParse(t *testing.T) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	for _, kind := range []string{Delay, LossLike, SlowLink, DeafLeader} {
		for _, x := range []float64{0, 0.999} {
			p := toxiproxy.NewProxy(srv, "test", "127.0.0.1:0", "127.0.0.1:1")
			toxics, note := linkToxics(kind, Step{X: x}, "leader n1")
			if len(toxics) == 0 || !strings.HasSuffix(note, "; leader n1") {
				t.Errorf("%s: toxics %v, note %q", kind, toxics, note)
			}
			for _, tx := range toxics {
				if _, err := p.Toxics.AddToxicJson(strings.NewReader(tx)); err != nil {
					t.Errorf("%s: toxiproxy refuses %s: %v", kind, tx, err)
				}
			}
			p.Toxics.ResetToxics(zerolog.Nop().WithContext(context.Background()))
		}
	}
}

// TestSkewBounds: a clock skew is 5 s to 100 s either way, short of the
// two minutes the state machine remembers request ids for.
func TestSkewBounds(t *testing.T) {
	for _, s := range Plan(Config{Seed: 3, Kinds: []string{ClockSkew}}, 200) {
		d := skewFor(s)
		if d < 0 {
			d = -d
		}
		if d < 5*time.Second || d > 100*time.Second {
			t.Errorf("step %+v: skew %v out of bounds", s, skewFor(s))
		}
	}
}

// TestEveryKindSaysWhatItNeeds: the kinds that need something of the
// cluster say so, so that a run leaves out what the machine cannot do.
func TestEveryKindSaysWhatItNeeds(t *testing.T) {
	for kind, want := range map[string]string{
		IsolateLeader: "netns", OneWayLeaderIn: "iptables", OneWayPair: "iptables", LossyPair: "iptables", Delay: "proxies", LossLike: "proxies", SlowLink: "proxies", DeafLeader: "proxies",
		CrashLeaderMachine: "machines", CrashMajorityMachines: "machines", AddNode: "spares", DrainNode: "spares",
	} {
		if !strings.Contains(strings.Join(Needs(kind), ","), want) {
			t.Errorf("Needs(%s) = %v, want %s among them", kind, Needs(kind), want)
		}
	}
	for _, kind := range []string{KillLeader, PauseNode, ClockSkew, TransferLeader} {
		if len(Needs(kind)) != 0 {
			t.Errorf("Needs(%s) = %v, want nothing", kind, Needs(kind))
		}
	}
}
