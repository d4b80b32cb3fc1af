package certs

import (
	"crypto/x509"
	"slices"
)

// The roles of the cluster plane. Every certificate of the cluster CA names
// one, and each gRPC method admits some roles only (cmd/quorumbus/cluster's
// table): a front-end's or gateway's certificate cannot reach the Raft
// transport or change a group's membership, which only nodes may.
const (
	RoleNode     = "node"     // a storage node: every service, and the only role that serves
	RoleFrontend = "frontend" // an AMQP front-end: the partitions' data plane, the routing table
	RoleGateway  = "gateway"  // the management API: the data plane and catalog changes
	RoleCLI      = "cli"      // the CLI: catalog changes, purge and re-drive
)

// Roles lists every role.
var Roles = []string{RoleNode, RoleFrontend, RoleGateway, RoleCLI}

// RoleOf is the role a certificate names: its Subject's first
// Organizational Unit that is a role (what cert-manager's
// subject.organizationalUnits and openssl's OU= set, and dev mode issues),
// or, for a certificate without any OU, its Common Name when that is a
// role (Helm's genSignedCert can set nothing else). Anything else is "",
// which no method admits.
func RoleOf(cert *x509.Certificate) string {
	if cert == nil {
		return ""
	}
	if ous := cert.Subject.OrganizationalUnit; len(ous) > 0 {
		for _, ou := range ous {
			if slices.Contains(Roles, ou) {
				return ou
			}
		}
		return ""
	}
	if slices.Contains(Roles, cert.Subject.CommonName) {
		return cert.Subject.CommonName
	}
	return ""
}
