package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// DevFiles are the files GenerateDev keeps under its directory.
type DevFiles struct {
	CA   string // the CA certificate clients trust (ca.crt)
	Cert string // the server certificate (server.crt), signed by the CA
	Key  string // its key (server.key)
}

const (
	devCALifetime     = 10 * 365 * 24 * time.Hour
	devServerLifetime = 397 * 24 * time.Hour // what browsers and Apple's TLS accept
	// devRenewBefore: a server certificate this close to its end is made
	// again at the next start.
	devRenewBefore = 30 * 24 * time.Hour
)

// GenerateDev makes, under dir, a self-signed CA and a server certificate
// it signed for hosts (names and IP addresses) plus localhost, 127.0.0.1
// and ::1. Files from an earlier start are kept while they cover hosts
// and last another 30 days, so that a client that trusts the CA keeps
// trusting it across restarts; a CA that cannot be read is made anew.
func GenerateDev(dir string, hosts ...string) (DevFiles, error) {
	f := DevFiles{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "server.crt"), Key: filepath.Join(dir, "server.key")}
	caKeyFile := filepath.Join(dir, "ca.key")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return f, err
	}
	hosts = append([]string{"localhost", "127.0.0.1", "::1"}, hosts...)
	now := time.Now()
	ca, caKey, err := loadCA(f.CA, caKeyFile, now)
	if err != nil {
		if ca, caKey, err = newCA(f.CA, caKeyFile, now); err != nil {
			return f, err
		}
	}
	if serverValid(f, ca, hosts, "", now) {
		return f, nil
	}
	return f, newServer(f, ca, caKey, hosts, "", now, x509.ExtKeyUsageServerAuth)
}

func loadCA(certFile, keyFile string, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, err
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || !ca.IsCA || now.Add(devRenewBefore).After(ca.NotAfter) {
		return nil, nil, errors.New("certs: the dev CA is unusable or about to expire")
	}
	return ca, key, nil
}

func newCA(certFile, keyFile string, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"quorumbus dev"}, CommonName: "quorumbus dev CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(devCALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	if err := writePEM(certFile, "CERTIFICATE", der, 0o644); err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	if err := writePEM(keyFile, "EC PRIVATE KEY", kder, 0o600); err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(der)
	return ca, key, err
}

// serverValid reports whether the server certificate on disk was signed
// by ca, covers every host, names role (RoleOf; "" for none) and lasts
// long enough.
func serverValid(f DevFiles, ca *x509.Certificate, hosts []string, role string, now time.Time) bool {
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return false
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil || now.Add(devRenewBefore).After(leaf.NotAfter) || leaf.CheckSignatureFrom(ca) != nil || RoleOf(leaf) != role {
		return false
	}
	for _, h := range hosts {
		if leaf.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// newServer makes f's certificate and key, for hosts, naming role in its
// Organizational Unit (none when empty), with usages.
func newServer(f DevFiles, ca *x509.Certificate, caKey *ecdsa.PrivateKey, hosts []string, role string, now time.Time, usages ...x509.ExtKeyUsage) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{Organization: []string{"quorumbus dev"}, CommonName: hosts[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(devServerLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
	}
	if role != "" {
		tmpl.Subject.OrganizationalUnit = []string{role}
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	// The key first, then the certificate: a Reloader that catches the
	// pair between the two writes fails to load it and keeps the old one.
	if err := writePEM(f.Key, "EC PRIVATE KEY", kder, 0o600); err != nil {
		return err
	}
	return writePEM(f.Cert, "CERTIFICATE", der, 0o644)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// writePEM writes through a temporary file and a rename, so that a reader
// sees the old file or the new one, never half of one.
func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if samePEM(path, data) {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	return os.Rename(tmp, path)
}

// DevMember is a certificate GenerateDevCluster makes: its file name and
// the role it names (RoleNode, ...).
type DevMember struct{ Name, Role string }

// GenerateDevCluster makes, under dir, a cluster CA (ca.crt, ca.key) and,
// for each member, a certificate and key (NAME.crt, NAME.key) it signed,
// naming the member's role (its Subject's OU; RoleOf), usable both to serve
// and to dial (server and client authentication), for localhost and the
// loopback addresses. It is `quorumbus dev`'s cluster plane: one process,
// but every gRPC connection between its parts goes through mutual TLS as a
// deployment's would. Files of an earlier start are kept while valid (and
// of the same role), as GenerateDev keeps its own.
func GenerateDevCluster(dir string, members ...DevMember) (map[string]DevFiles, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caFile, caKeyFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	now := time.Now()
	ca, caKey, err := loadCA(caFile, caKeyFile, now)
	if err != nil {
		if ca, caKey, err = newCA(caFile, caKeyFile, now); err != nil {
			return nil, err
		}
	}
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	out := make(map[string]DevFiles, len(members))
	for _, m := range members {
		f := DevFiles{CA: caFile, Cert: filepath.Join(dir, m.Name+".crt"), Key: filepath.Join(dir, m.Name+".key")}
		if !serverValid(f, ca, hosts, m.Role, now) {
			if err := newServer(f, ca, caKey, hosts, m.Role, now, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth); err != nil {
				return nil, err
			}
		}
		out[m.Name] = f
	}
	return out, nil
}
