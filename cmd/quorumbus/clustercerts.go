package main

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"

	"github.com/quorumbus/quorumbus/frontend/certs"
)

// clusterCertsCmd makes a cluster CA and one certificate per role, for a
// cluster run by hand (README.md) or a first deployment: what node,
// frontend and gateway need to start without -plain-cluster.
func clusterCertsCmd(args []string) error {
	fs := flag.NewFlagSet("cluster-certs", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory to write ca.crt, ca.key and ROLE.crt, ROLE.key for node, frontend, gateway and cli into (required); files of an earlier run are kept while valid")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: quorumbus cluster-certs -dir DIR\n\nMakes a cluster CA (ECDSA P-256, ten years) and, signed by it, one certificate\nper role of the cluster plane, its role in the Subject's OU (docs/security.md).\nGive each process its role's files with -cluster-tls-cert, -cluster-tls-key\nand -cluster-ca; the CLI takes -cluster-tls-dir DIR (cli.crt). Keep ca.key\noffline once the certificates are made.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("-dir is required")
	}
	var members []certs.DevMember
	for _, role := range certs.Roles {
		members = append(members, certs.DevMember{Name: role, Role: role})
	}
	files, err := certs.GenerateDevCluster(*dir, members...)
	if err != nil {
		return err
	}
	fmt.Printf("cluster CA %s\n", filepath.Join(*dir, "ca.crt"))
	for _, role := range certs.Roles {
		fmt.Printf("%-8s -cluster-tls-cert %s -cluster-tls-key %s -cluster-ca %s\n", role, files[role].Cert, files[role].Key, files[role].CA)
	}
	return nil
}
