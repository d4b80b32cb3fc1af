package certs

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
)

func TestRoleOf(t *testing.T) {
	for _, c := range []struct {
		subject pkix.Name
		want    string
	}{
		{pkix.Name{OrganizationalUnit: []string{"node"}, CommonName: "localhost"}, RoleNode},
		{pkix.Name{OrganizationalUnit: []string{"team-a", "gateway"}}, RoleGateway},
		{pkix.Name{OrganizationalUnit: []string{"team-a"}, CommonName: "node"}, ""}, // an OU that is no role: the CN is not read
		{pkix.Name{CommonName: "frontend"}, RoleFrontend},                           // Helm's genSignedCert
		{pkix.Name{CommonName: "cli"}, RoleCLI},
		{pkix.Name{CommonName: "Node"}, ""},
		{pkix.Name{CommonName: "quorumbus-node"}, ""},
		{pkix.Name{}, ""},
	} {
		if got := RoleOf(&x509.Certificate{Subject: c.subject}); got != c.want {
			t.Errorf("RoleOf(%v) = %q, want %q", c.subject, got, c.want)
		}
	}
	if RoleOf(nil) != "" {
		t.Error("no certificate has a role")
	}
}
