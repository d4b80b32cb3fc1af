package cluster

import (
	"crypto/x509"
	"fmt"
	"slices"

	"github.com/quorumbus/quorumbus/frontend/certs"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
	"github.com/quorumbus/quorumbus/proto/raftpb"
)

// Which role (certs.RoleOf of the peer's certificate) may call which gRPC
// method of a storage node, the only process that serves the cluster
// plane. A method absent from the table admits nodes only, so a service
// added later is closed to the other roles until it is listed here.
//
// Nodes may call everything: they replicate (Raft), change groups'
// membership, report and forward to the meta leader, and forward messages
// through other nodes' PartitionService. Front-ends move messages and read
// the routing table; gateways and the CLI do that and change the catalog.
var (
	dataPlane     = []string{certs.RoleNode, certs.RoleFrontend, certs.RoleGateway, certs.RoleCLI}
	catalogChange = []string{certs.RoleNode, certs.RoleGateway, certs.RoleCLI}
	nodesOnly     = []string{certs.RoleNode}
)

// serviceRoles are the roles a whole service admits, unless methodRoles
// names the method.
var serviceRoles = map[string][]string{
	raftpb.Raft_ServiceDesc.ServiceName:                  nodesOnly,
	partitionpb.GroupMembership_ServiceDesc.ServiceName:  nodesOnly,
	partitionpb.PartitionService_ServiceDesc.ServiceName: dataPlane,
	placementpb.PlacementService_ServiceDesc.ServiceName: catalogChange,
}

func method(service, name string) string { return "/" + service + "/" + name }

var (
	partitionSvc = partitionpb.PartitionService_ServiceDesc.ServiceName
	placementSvc = placementpb.PlacementService_ServiceDesc.ServiceName
)

// methodRoles are the exceptions to serviceRoles.
var methodRoles = map[string][]string{
	// The placement controller creates and deletes an entity's state on
	// the groups that host it.
	method(partitionSvc, "UpsertEntity"): nodesOnly,
	method(partitionSvc, "DeleteEntity"): nodesOnly,
	// The chaos suite's convergence check reads it with the CLI's role.
	method(partitionSvc, "Digest"):        {certs.RoleNode, certs.RoleCLI},
	method(placementSvc, "CatalogDigest"): {certs.RoleNode, certs.RoleCLI},
	// Only the meta group's members report which node leads which group.
	method(placementSvc, "ReportGroups"): nodesOnly,
	// Everyone reads the catalog and the routing table; a front-end
	// creates what its -config declares.
	method(placementSvc, "WatchRoutes"):  dataPlane,
	method(placementSvc, "GetEntity"):    dataPlane,
	method(placementSvc, "ListEntities"): dataPlane,
	method(placementSvc, "CreateEntity"): dataPlane,
	// The SDKs' rule managers add and remove a subscription's rules over
	// AMQP ($management, with the Manage claim the front-end checks).
	method(placementSvc, "AddRule"):                dataPlane,
	method(placementSvc, "RemoveRule"):             dataPlane,
	method(placementSvc, "ListAuthorizationRules"): catalogChange,
}

// AuthorizeRole is the cluster plane's rpcnet.Authorizer: the peer's
// certificate must name a role the method admits.
func AuthorizeRole(fullMethod string, cert *x509.Certificate) error {
	roles, ok := methodRoles[fullMethod]
	if !ok {
		roles = nodesOnly
		if svc, _, found := cutMethod(fullMethod); found {
			if r, ok := serviceRoles[svc]; ok {
				roles = r
			}
		}
	}
	role := certs.RoleOf(cert)
	if !slices.Contains(roles, role) {
		if role == "" {
			return fmt.Errorf("%w: the certificate names no role (node, frontend, gateway or cli: its OU, or its CN) and %s admits %v", certs.ErrRole, fullMethod, roles)
		}
		return fmt.Errorf("%w: role %q may not call %s", certs.ErrRole, role, fullMethod)
	}
	return nil
}

// cutMethod splits "/package.Service/Method".
func cutMethod(full string) (service, name string, ok bool) {
	if len(full) < 2 || full[0] != '/' {
		return "", "", false
	}
	for i := len(full) - 1; i > 0; i-- {
		if full[i] == '/' {
			return full[1:i], full[i+1:], true
		}
	}
	return "", "", false
}
