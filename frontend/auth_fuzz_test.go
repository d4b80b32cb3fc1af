package frontend

import (
	"bytes"
	"testing"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/placement/sas"
)

// FuzzSASLLogin: whatever a sasl-init carries, the login either fails or
// is ANONYMOUS (no claim) or PLAIN with a rule's exact name and key (that
// rule's claim).
func FuzzSASLLogin(f *testing.F) {
	rs, err := sas.NewRuleset(sas.DevRule(), sas.Rule{Name: "reader", Entity: "q", Rights: sas.Listen, PrimaryKey: "rk", SecondaryKey: "rk2"})
	if err != nil {
		f.Fatal(err)
	}
	login := saslLogin{rules: StaticRules(rs), log: func(string, ...any) {}}
	f.Add("PLAIN", []byte("\x00RootManageSharedAccessKey\x00SAS_KEY_VALUE"))
	f.Add("PLAIN", []byte("authz\x00reader\x00rk2"))
	f.Add("PLAIN", []byte("\x00reader\x00"))
	f.Add("ANONYMOUS", []byte("anonymous"))
	f.Add("EXTERNAL", []byte{})
	f.Fuzz(func(t *testing.T, mech string, resp []byte) {
		id, principal, err := login.AuthenticatePrincipal(amqp.Symbol(mech), resp, "")
		if err != nil {
			return
		}
		switch mech {
		case "ANONYMOUS":
			if principal != nil {
				t.Fatal("ANONYMOUS got a claim")
			}
		case "PLAIN":
			pl, ok := principal.(*plainLogin)
			parts := bytes.SplitN(resp, []byte{0}, 3)
			if !ok || len(parts) != 3 || pl.claim.Rule != id || pl.rules != rs {
				t.Fatalf("PLAIN %q logged in as %q with %#v", resp, id, principal)
			}
			if _, err := rs.Authenticate(string(parts[1]), string(parts[2])); err != nil {
				t.Fatalf("PLAIN %q logged in with a key the rules refuse", resp)
			}
			// What the connection keeps to check the login again is
			// the key's digest, which admits it as the key does.
			if again, err := rs.AuthenticateDigest(pl.name, pl.key); err != nil || again != pl.claim {
				t.Fatalf("PLAIN %q: the kept digest gives %v, %v", resp, again, err)
			}
		default:
			t.Fatalf("mechanism %q logged in", mech)
		}
	})
}
