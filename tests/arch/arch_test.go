// Package arch checks that dependencies between quorumbus packages point the
// way the design says. It reads the real import graph
// with `go list -deps` and checks it against a table of rules.
package arch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/quorumbus/quorumbus"

// our turns a path relative to the module root into a full import pattern.
func our(rel string) string { return module + "/" + rel }

// A rule says which imports the packages it covers must not have.
//
// Patterns are import paths split at '/'. An element "..." matches any
// number of elements, including none, so "net/..." matches "net" and
// "net/http"; any other element is a path.Match glob, so "*test" matches
// "amqptest". Imports are checked transitively: a package breaks a rule
// through an import of an import just as much as directly.
type rule struct {
	name   string
	pkgs   []string // packages the rule covers
	except []string // covered by pkgs, but not by this rule
	forbid []string // imports the covered packages must not have
	// permit are imports that forbid would match but this rule allows
	// (placement/sas and placement/credits are shared by front-ends and
	// gateways).
	permit []string
	// direct are forbidden as direct imports only: what the covered code
	// itself must not use, though a library it builds on may (pebble
	// imports net/url; generated service stubs beside protobuf messages
	// import grpc).
	direct []string
	// stdOnly also forbids every import outside the standard library,
	// except those matching allow.
	stdOnly bool
	allow   []string
	reason  string
}

// helpers matches our test-helper packages (partitiontest, nodetest,
// amqptest, ...) and anything below them.
var helpers = our(".../*test/...")

var rules = []rule{
	{
		name:   "partition is pure",
		pkgs:   []string{our("partition/...")},
		except: []string{our("partition/partitiontest/...")},
		forbid: []string{
			"github.com/hashicorp/raft/...",
			our("node/..."), our("placement/..."), our("frontend/..."),
			our("gateway/..."), our("cmd/..."),
		},
		direct: []string{"google.golang.org/grpc/...", "net/...", "time"},
		reason: "the partition state machine must be deterministic and know nothing of Raft or networking; node wraps it",
	},
	{
		name:    "AMQP engine is standalone",
		pkgs:    []string{our("frontend/amqp/...")},
		except:  []string{our("frontend/amqp/amqptest/...")},
		stdOnly: true,
		allow:   []string{our("frontend/amqp/...")},
		forbid:  []string{our("frontend/amqp/amqptest/...")},
		reason:  "frontend/amqp is the AMQP 1.0 protocol only, built on the standard library, and knows nothing of Service Bus or the cluster",
	},
	{
		// frontend/amqp falls under this rule too; its own rule is stricter.
		name:   "frontends and gateways are stateless",
		pkgs:   []string{our("frontend/..."), our("gateway/...")},
		forbid: []string{our("partition/..."), our("node/..."), our("placement/...")},
		permit: []string{our("placement/sas"), our("placement/credits")},
		reason: "front-ends and gateways reach storage and the catalog only through the gRPC services in proto/ (placement/sas, the pure SAS rules and tokens, and placement/credits, the namespace's credit budget, they share)",
	},
	{
		name:    "certificates are standalone",
		pkgs:    []string{our("frontend/certs/...")},
		stdOnly: true,
		reason:  "frontend/certs serves certificate files to any TLS listener (AMQPS, HTTPS, the gateway's) and knows nothing of the broker",
	},
	{
		name: "the gRPC dial helper is standalone",
		pkgs: []string{our("proto/rpcnet/...")},
		forbid: []string{
			our("partition/..."), our("node/..."), our("placement/..."), our("frontend/..."),
			our("gateway/..."), our("cmd/..."),
		},
		reason: "proto/rpcnet is how every process dials and serves gRPC (node, front-end, gateway, placement, CLI); it takes the TLS configurations it is given and knows nothing of what travels",
	},
	{
		name: "the group leader client is standalone",
		pkgs: []string{our("proto/groupcall/...")},
		forbid: []string{
			our("partition/..."), our("node/..."), our("placement/..."), our("frontend/..."),
			our("gateway/..."), our("cmd/..."),
		},
		reason: "proto/groupcall is the one leader-following client of a partition group's services, shared by frontend/routing, placement and node/nodetest; each of them may import proto/ and none may import the others' packages",
	},
	{
		name:    "SAS is pure",
		pkgs:    []string{our("placement/sas/...")},
		stdOnly: true,
		direct:  []string{"net", "net/http/...", "os/...", "log/..."},
		reason:  "placement/sas parses, signs and validates tokens from what it is given; front-ends, gateways and the CLI share it, so it must pull in nothing of the cluster",
	},
	{
		name:    "credits are pure",
		pkgs:    []string{our("placement/credits/...")},
		stdOnly: true,
		direct:  []string{"net/...", "os/...", "log/...", "math/rand/...", "crypto/rand"},
		reason:  "placement/credits counts a namespace's credits by the clock it is given; front-ends and gateways share it, so it must pull in nothing of the cluster or the network",
	},
	{
		// partition/store falls under "partition is pure" too.
		name: "the partition store is under the rules",
		pkgs: []string{our("partition/store/...")},
		forbid: []string{
			our("partition"), our("partition/rules/..."), our("partition/filter/..."),
			our("partition/partitiontest/..."),
		},
		reason: "partition/store keeps records, indexes and their keys; what a message may do is partition's, which calls the store and not the other way",
	},
	{
		name:   "the partition rules reach storage through its store",
		pkgs:   []string{our("partition")},
		direct: []string{"github.com/cockroachdb/pebble/..."},
		reason: "partition's rules speak the store's API (partition/store: records, indexes, the db, snapshots); only the store knows the storage engine, so the rules build no key and walk no iterator",
	},
	{
		// partition/filter falls under "partition is pure" too; this rule
		// is stricter.
		name:    "the filter language is pure",
		pkgs:    []string{our("partition/filter/...")},
		stdOnly: true,
		direct:  []string{"time", "net/...", "os/...", "math/rand/...", "crypto/rand", "sync/..."},
		reason:  "partition/filter compiles and evaluates rules; every replica must decide the same for the same message and rule, so it reads nothing but the message and the rule, and newid() takes an injected source",
	},
	{
		name:   "the gateway is HTTP over the gRPC services",
		pkgs:   []string{our("gateway/...")},
		forbid: []string{our("frontend/..."), our("cmd/...")},
		reason: "the gateway serves the management API from PlacementService and the partitions' Stats, which cmd wires in (routing.Router); it shares nothing with the AMQP front-end",
	},
	{
		name: "the catalog is pure",
		pkgs: []string{our("placement/catalog/...")},
		forbid: []string{
			"github.com/hashicorp/raft/...",
			our("placement"), our("node/..."), our("frontend/..."), our("gateway/..."), our("cmd/..."),
		},
		direct: []string{"google.golang.org/grpc/...", "net/...", "time", "math/rand/...", "crypto/rand"},
		reason: "the catalog is the meta group's state machine: every member must apply the same commands alike, with the time they carry, so it reads no clock, no randomness and no network, and knows nothing of Raft; placement adapts it (fsm.go)",
	},
	{
		name:    "the placement planner is pure",
		pkgs:    []string{our("placement/planner/...")},
		stdOnly: true,
		direct:  []string{"time", "net/...", "math/rand/...", "crypto/rand"},
		reason:  "the planner decides placements from the state it is given, so that every member that runs it decides the same",
	},
	{
		name:   "the load tool is a client",
		pkgs:   []string{our("cmd/quorumbus/loadtool/...")},
		except: []string{helpers},
		forbid: []string{
			our("partition/..."), our("node/..."), our("placement/..."), our("frontend/..."),
			our("gateway/..."), our("proto/..."),
		},
		reason: "quorumbus bench drives any AMQP 1.0 endpoint as a client would, through go-amqp; it must not reach into the broker",
	},
	{
		name:    "the admin HTTP listener is standalone",
		pkgs:    []string{our("cmd/quorumbus/adminhttp/...")},
		stdOnly: true,
		reason:  "cmd/quorumbus/adminhttp serves health, readiness and profiles for every process from checks the process hands it; it knows nothing of the broker",
	},
	{
		name:   "placement does not import node",
		pkgs:   []string{our("placement/...")},
		forbid: []string{our("node/...")},
		reason: "placement and node meet only through proto/ and cmd/",
	},
	{
		name:   "node does not import placement",
		pkgs:   []string{our("node/...")},
		forbid: []string{our("placement/...")},
		reason: "placement and node meet only through proto/ and cmd/",
	},
	{
		name:   "only cmd and tests import cmd",
		pkgs:   []string{our("...")},
		except: []string{our("cmd/..."), our("tests/...")},
		forbid: []string{our("cmd/...")},
		reason: "cmd/ only wires components together; nothing is built on top of it",
	},
	{
		name:   "test helpers stay out of production packages",
		pkgs:   []string{our("...")},
		except: []string{our("cmd/..."), our("tests/..."), helpers},
		forbid: []string{helpers},
		reason: "xxxtest helper packages are for tests only and must not be compiled into the binary",
	},
	{
		name: "no test helpers in binaries",
		pkgs: []string{our("cmd/...")},
		// amqp-testbroker is the engine's example broker, served by
		// `make run` until the dev cluster exists; it is not the product.
		except: []string{our("cmd/amqp-testbroker")},
		// Our xxxtest helpers and the standard library's test packages.
		// (The runtime's own internal/synctest, imported by sync, is not a
		// test helper.)
		forbid: []string{helpers, our(".../*test")},
		// hashicorp/raft ships its test helpers in its main package, so
		// testing reaches every binary through it: only our own code must
		// not pull it in.
		direct: []string{"testing", "testing/...", "net/http/httptest"},
		reason: "test helpers (ours, testing, httptest) must not be compiled into a command",
	},
}

// pkg is one package of the import graph as `go list -deps -json` reports it.
type pkg struct {
	ImportPath string
	Imports    []string // direct imports
	Deps       []string // all imports, transitively
	Error      *struct{ Err string }
	DepsErrors []struct{ Err string }
}

type violation struct {
	rule   string
	pkg    string // the package that breaks the rule
	dep    string // the forbidden import
	via    []string
	reason string
}

func (v violation) String() string {
	s := fmt.Sprintf("%s imports %s", v.pkg, v.dep)
	if len(v.via) > 2 {
		s += " (via " + strings.Join(v.via, " -> ") + ")"
	}
	return fmt.Sprintf("%s\n\trule %q: %s", s, v.rule, v.reason)
}

// match reports whether an import path matches a pattern (see rule).
func match(pattern, path string) bool {
	return matchElems(strings.Split(pattern, "/"), strings.Split(path, "/"))
}

func matchElems(pat, elems []string) bool {
	for len(pat) > 0 {
		if pat[0] == "..." {
			for i := 0; i <= len(elems); i++ {
				if matchElems(pat[1:], elems[i:]) {
					return true
				}
			}
			return false
		}
		if len(elems) == 0 {
			return false
		}
		if ok, err := filepath.Match(pat[0], elems[0]); err != nil || !ok {
			return false
		}
		pat, elems = pat[1:], elems[1:]
	}
	return len(elems) == 0
}

func matchAny(patterns []string, path string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return match(p, path) })
}

// isStd reports whether an import path belongs to the standard library: its
// first element has no dot.
func isStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

func isOurs(path string) bool {
	return path == module || strings.HasPrefix(path, module+"/")
}

// covers reports whether r applies to the package path.
func (r rule) covers(path string) bool {
	return isOurs(path) && matchAny(r.pkgs, path) && !matchAny(r.except, path)
}

// forbids reports whether r forbids importing dep.
func (r rule) forbids(dep string) bool {
	if matchAny(r.permit, dep) {
		return false
	}
	if matchAny(r.forbid, dep) {
		return true
	}
	return r.stdOnly && !isStd(dep) && !matchAny(r.allow, dep)
}

// check returns every way the graph breaks the rules, and the names of the
// rules that cover no package (yet).
func check(rules []rule, graph []pkg) (violations []violation, unused []string) {
	byPath := make(map[string]pkg, len(graph))
	for _, p := range graph {
		byPath[p.ImportPath] = p
	}
	for _, r := range rules {
		covered := 0
		for _, p := range graph {
			if !r.covers(p.ImportPath) {
				continue
			}
			covered++
			deps := slices.Clone(p.Deps)
			for _, d := range p.Imports { // Deps holds them already; a fake graph may not
				if !slices.Contains(deps, d) {
					deps = append(deps, d)
				}
			}
			slices.Sort(deps)
			for _, d := range deps {
				if d == p.ImportPath || !r.forbids(d) {
					continue
				}
				via := importChain(byPath, p.ImportPath, d)
				if len(via) > 2 && slices.ContainsFunc(via[1:len(via)-1], r.forbids) {
					continue // reached through another forbidden import, which is reported
				}
				violations = append(violations, violation{
					rule: r.name, pkg: p.ImportPath, dep: d, via: via, reason: r.reason,
				})
			}
		}
		for _, p := range graph {
			if !r.covers(p.ImportPath) {
				continue
			}
			for _, d := range p.Imports {
				if matchAny(r.direct, d) {
					violations = append(violations, violation{
						rule: r.name, pkg: p.ImportPath, dep: d, via: []string{p.ImportPath, d}, reason: r.reason,
					})
				}
			}
		}
		if covered == 0 {
			unused = append(unused, r.name)
		}
	}
	return violations, unused
}

// importChain finds a shortest chain of direct imports from one package to
// another, or nil if the graph does not show one.
func importChain(byPath map[string]pkg, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			var chain []string
			for p := to; p != ""; p = prev[p] {
				chain = append(chain, p)
			}
			slices.Reverse(chain)
			return chain
		}
		for _, next := range byPath[cur].Imports {
			if _, seen := prev[next]; !seen {
				prev[next] = cur
				queue = append(queue, next)
			}
		}
	}
	return nil
}

// goList runs `go list -e -deps -json ./...` at the module root. -e keeps
// going past packages that do not build (work in progress elsewhere); only a
// failure of go list itself is an error.
func goList(t *testing.T) []pkg {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == "/dev/null" {
		t.Fatalf("not inside the module: go env GOMOD printed %q", gomod)
	}
	root := filepath.Dir(gomod)

	cmd := exec.Command("go", "list", "-m")
	cmd.Dir = root
	if out, err := cmd.Output(); err != nil {
		t.Fatalf("go list -m: %v", err)
	} else if got := strings.TrimSpace(string(out)); got != module {
		t.Fatalf("module path is %q, the rules are written for %q", got, module)
	}

	var stderr bytes.Buffer
	cmd = exec.Command("go", "list", "-e", "-deps", "-json=ImportPath,Imports,Deps,Error,DepsErrors", "./...")
	cmd.Dir = root
	cmd.Stderr = &stderr
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("go list -e -deps -json ./... in %s: %v\n%s", root, err, stderr.String())
	}
	var graph []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding go list output: %v", err)
		}
		graph = append(graph, p)
	}
	if len(graph) == 0 {
		t.Fatalf("go list reported no packages in %s\n%s", root, stderr.String())
	}
	return graph
}

func TestDependencyDirections(t *testing.T) {
	graph := goList(t)
	for _, p := range graph {
		if !isOurs(p.ImportPath) {
			continue
		}
		if p.Error != nil {
			t.Logf("note: %s does not load cleanly, its imports may be incomplete: %s",
				p.ImportPath, strings.TrimSpace(p.Error.Err))
		} else if len(p.DepsErrors) > 0 {
			t.Logf("note: an import of %s does not load cleanly: %s",
				p.ImportPath, strings.TrimSpace(p.DepsErrors[0].Err))
		}
	}
	violations, unused := check(rules, graph)
	for _, name := range unused {
		t.Logf("rule %q covers no package yet", name)
	}
	for _, v := range violations {
		t.Errorf("%s", v)
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		pattern, path string
		want          bool
	}{
		{"net/...", "net", true},
		{"net/...", "net/http", true},
		{"net/...", "network", false},
		{"net/...", "vendor/golang.org/x/net/http2", false},
		{"github.com/hashicorp/raft/...", "github.com/hashicorp/raft", true},
		{"github.com/hashicorp/raft/...", "github.com/hashicorp/raft-boltdb/v2", false},
		{"m/partition", "m/partition/store", false},
		{"m/.../*test/...", "m/partition/partitiontest", true},
		{"m/.../*test/...", "m/frontend/amqp/amqptest/inner", true},
		{"m/.../*test/...", "m/tests/arch", false},
		{"m/.../*test/...", "m/cmd/amqp-testbroker", false},
		{".../*test", "net/http/httptest", true},
		{".../*test", "testing", false},
		{"m/...", "m", true},
		{"m/...", "mm/x", false},
	}
	for _, tt := range tests {
		if got := match(tt.pattern, tt.path); got != tt.want {
			t.Errorf("match(%q, %q) = %v, want %v", tt.pattern, tt.path, got, tt.want)
		}
	}
}

// TestCheck shows that the check can fail: each fake graph below breaks
// (or keeps) the real rule table in one way.
func TestCheck(t *testing.T) {
	P := our
	tests := []struct {
		name  string
		graph []pkg
		want  []string // "pkg -> dep" of every expected violation
	}{
		{
			name: "clean graph",
			graph: []pkg{
				{ImportPath: P("partition"), Imports: []string{"errors", P("proto/partitionpb")}, Deps: []string{"errors", P("proto/partitionpb"), "google.golang.org/protobuf/proto"}},
				{ImportPath: P("partition/partitiontest"), Imports: []string{P("partition"), "net"}, Deps: []string{P("partition"), "net"}},
				{ImportPath: P("frontend/amqp"), Imports: []string{"net", "encoding/binary"}, Deps: []string{"net", "encoding/binary", "vendor/golang.org/x/net/dns/dnsmessage"}},
				{ImportPath: P("frontend/amqp/amqptest"), Imports: []string{P("frontend/amqp")}, Deps: []string{P("frontend/amqp"), "net"}},
				{ImportPath: P("frontend"), Imports: []string{P("frontend/amqp"), P("proto/partitionpb"), "google.golang.org/grpc"}},
				{ImportPath: P("node"), Imports: []string{P("partition"), "github.com/hashicorp/raft", "google.golang.org/grpc"}},
				{ImportPath: P("cmd/quorumbus"), Imports: []string{P("node"), P("placement"), P("frontend")}},
				{ImportPath: P("tests/jepsen"), Imports: []string{P("cmd/quorumbus"), P("node/nodetest")}},
			},
		},
		{
			name: "partition reaches raft and net transitively",
			graph: []pkg{
				{ImportPath: P("partition/store"), Imports: []string{"example.com/kv"}, Deps: []string{"example.com/kv", "github.com/hashicorp/raft", "net"}},
				{ImportPath: "example.com/kv", Imports: []string{"github.com/hashicorp/raft"}},
				{ImportPath: "github.com/hashicorp/raft", Imports: []string{"net"}},
			},
			// net comes in through raft, so only raft is reported.
			want: []string{P("partition/store") + " -> github.com/hashicorp/raft"},
		},
		{
			name: "partition uses the network and the clock itself",
			graph: []pkg{
				{ImportPath: P("partition"), Imports: []string{"net", "time", "google.golang.org/grpc", P("proto/partitionpb")}, Deps: []string{"net", "time", "google.golang.org/grpc", P("proto/partitionpb")}},
				{ImportPath: P("proto/partitionpb"), Imports: []string{"google.golang.org/grpc"}},
			},
			want: []string{P("partition") + " -> net", P("partition") + " -> time", P("partition") + " -> google.golang.org/grpc"},
		},
		{
			name: "the catalog imports raft and reads the clock",
			graph: []pkg{
				{ImportPath: P("placement/catalog"), Imports: []string{"github.com/hashicorp/raft", "time", P("proto/placementpb")}, Deps: []string{"github.com/hashicorp/raft", "time", P("proto/placementpb"), "google.golang.org/grpc", "net"}},
				{ImportPath: P("proto/placementpb"), Imports: []string{"google.golang.org/grpc"}, Deps: []string{"google.golang.org/grpc", "net"}},
				{ImportPath: "github.com/hashicorp/raft", Imports: []string{"net", "time"}},
			},
			// grpc and net come in through placementpb's stubs: allowed.
			want: []string{P("placement/catalog") + " -> github.com/hashicorp/raft", P("placement/catalog") + " -> time"},
		},
		{
			name: "AMQP engine imports a third-party module and our frontend",
			graph: []pkg{
				{ImportPath: P("frontend/amqp"), Imports: []string{"golang.org/x/sync/errgroup", P("frontend/routing")}},
				{ImportPath: P("frontend/amqp/internal/codec"), Imports: []string{"encoding/binary"}},
				{ImportPath: P("frontend/amqp/sasl"), Imports: []string{P("frontend/amqp/internal/codec")}},
			},
			want: []string{P("frontend/amqp") + " -> golang.org/x/sync/errgroup", P("frontend/amqp") + " -> " + P("frontend/routing")},
		},
		{
			name: "frontend and gateway reach into storage",
			graph: []pkg{
				{ImportPath: P("frontend/routing"), Imports: []string{P("placement/catalog")}},
				{ImportPath: P("gateway"), Imports: []string{P("partition")}},
			},
			want: []string{P("frontend/routing") + " -> " + P("placement/catalog"), P("gateway") + " -> " + P("partition")},
		},
		{
			name: "front-ends and gateways share the credits, which reach for the network",
			graph: []pkg{
				{ImportPath: P("frontend"), Imports: []string{P("placement/credits"), P("placement/sas")}},
				{ImportPath: P("gateway"), Imports: []string{P("placement/credits")}},
				{ImportPath: P("placement/credits"), Imports: []string{"time", "sync", "net"}},
			},
			want: []string{P("placement/credits") + " -> net"},
		},
		{
			name: "placement and node import each other",
			graph: []pkg{
				{ImportPath: P("placement/controller"), Imports: []string{P("node/raftmux")}},
				{ImportPath: P("node"), Imports: []string{P("placement")}},
			},
			want: []string{P("placement/controller") + " -> " + P("node/raftmux"), P("node") + " -> " + P("placement")},
		},
		{
			name: "a library imports cmd",
			graph: []pkg{
				{ImportPath: P("node"), Imports: []string{P("cmd/quorumbus/flags")}},
			},
			want: []string{P("node") + " -> " + P("cmd/quorumbus/flags")},
		},
		{
			name: "test helpers compiled into production code",
			graph: []pkg{
				{ImportPath: P("node"), Imports: []string{P("partition/partitiontest")}},
				{ImportPath: P("cmd/quorumbus"), Imports: []string{P("frontend/amqp/amqptest"), "net/http/httptest"}},
			},
			want: []string{
				P("node") + " -> " + P("partition/partitiontest"),
				P("cmd/quorumbus") + " -> " + P("frontend/amqp/amqptest"),
				P("cmd/quorumbus") + " -> net/http/httptest",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			violations, _ := check(rules, tt.graph)
			var got []string
			for _, v := range violations {
				got = append(got, v.pkg+" -> "+v.dep)
			}
			got = slices.Compact(slices.Sorted(slices.Values(got))) // one import may break two rules
			want := slices.Sorted(slices.Values(tt.want))
			if !slices.Equal(got, want) {
				t.Errorf("violations:\n\t%s\nwant:\n\t%s\nfull report:\n%v",
					strings.Join(got, "\n\t"), strings.Join(want, "\n\t"), violations)
			}
		})
	}
}

func TestViolationMessage(t *testing.T) {
	graph := []pkg{
		{ImportPath: our("partition"), Imports: []string{"example.com/kv"}, Deps: []string{"example.com/kv", "github.com/hashicorp/raft"}},
		{ImportPath: "example.com/kv", Imports: []string{"github.com/hashicorp/raft"}},
	}
	violations, _ := check(rules, graph)
	if len(violations) != 1 {
		t.Fatalf("got %d violations, want 1: %v", len(violations), violations)
	}
	msg := violations[0].String()
	for _, want := range []string{our("partition"), "github.com/hashicorp/raft", "example.com/kv", "partition is pure", "deterministic"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not mention %q", msg, want)
		}
	}
}
