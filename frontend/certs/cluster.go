package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Cluster is one process's side of the cluster plane's mutual TLS: its
// certificate and key, and the cluster CA that signed every member's. All
// three files are re-read when they change, so that a rotation (of a
// process's certificate, or of the CA bundle during a CA rotation) takes
// effect without a restart.
//
// A peer is a member when its certificate chains to the cluster CA; host
// names are not checked, since members reach each other by addresses that
// change (pod IPs) and the CA signs members only. A deployment therefore
// gives the cluster a CA of its own, not one that signs anything else.
type Cluster struct {
	pair *Reloader
	ca   *poolReloader
}

// NewCluster loads the three files once; an error means the process cannot
// take part in the cluster plane.
func NewCluster(certFile, keyFile, caFile string, log *slog.Logger) (*Cluster, error) {
	if certFile == "" || keyFile == "" || caFile == "" {
		return nil, errors.New("certs: cluster TLS needs a certificate, its key and the cluster CA")
	}
	pair, err := NewReloader(certFile, keyFile, log)
	if err != nil {
		return nil, err
	}
	ca, err := newPoolReloader(caFile, log)
	if err != nil {
		return nil, err
	}
	return &Cluster{pair: pair, ca: ca}, nil
}

// ServerConfig serves this process's certificate and admits only clients
// that present a certificate of the cluster CA for client authentication.
func (c *Cluster) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// A fresh configuration per handshake picks up a rotated CA.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return &tls.Config{
				MinVersion:     tls.VersionTLS12,
				GetCertificate: c.pair.GetCertificate,
				ClientAuth:     tls.RequireAndVerifyClientCert,
				ClientCAs:      c.ca.pool(),
			}, nil
		},
	}
}

// ClientConfig presents this process's certificate and accepts a server
// whose certificate chains to the cluster CA for server authentication and
// names RoleNode: storage nodes are the cluster plane's only servers, so a
// front-end's or CLI's certificate cannot pose as one (to hand out forged
// routing tables, say).
func (c *Cluster) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return c.pair.GetCertificate(nil)
		},
		// The standard check would also match the host name, which
		// members do not have (see Cluster); VerifyConnection does the
		// chain check against the current CA instead.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if err := c.verify(cs.PeerCertificates, x509.ExtKeyUsageServerAuth); err != nil {
				return err
			}
			if role := RoleOf(cs.PeerCertificates[0]); role != RoleNode {
				return fmt.Errorf("%w: the server's certificate names role %q, and only nodes serve", ErrRole, role)
			}
			return nil
		},
	}
}

// HTTPSConfig serves this process's certificate to HTTPS clients, who need
// none of their own (health probes, Prometheus).
func (c *Cluster) HTTPSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.pair.GetCertificate}
}

// ErrNotMember is returned for a peer certificate the cluster CA did not sign.
var ErrNotMember = errors.New("certs: the peer's certificate is not one of the cluster CA")

// ErrRole is returned for a peer whose certificate's role (RoleOf) may not
// do what it attempts.
var ErrRole = errors.New("certs: the peer's role does not allow this")

func (c *Cluster) verify(chain []*x509.Certificate, usage x509.ExtKeyUsage) error {
	if len(chain) == 0 {
		return fmt.Errorf("%w: none presented", ErrNotMember)
	}
	inter := x509.NewCertPool()
	for _, cert := range chain[1:] {
		inter.AddCert(cert)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: c.ca.pool(), Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotMember, err)
	}
	return nil
}

// poolReloader serves the CA certificates of a PEM file (one or more: a
// bundle of the old and the new CA during a CA rotation), re-read when the
// file changes; a file that does not load keeps the previous pool.
type poolReloader struct {
	file string
	log  *slog.Logger
	now  func() time.Time

	mu        sync.Mutex
	cur       *x509.CertPool
	stamp     fileStamp
	lastCheck time.Time
}

func newPoolReloader(file string, log *slog.Logger) (*poolReloader, error) {
	if log == nil {
		log = slog.Default()
	}
	r := &poolReloader{file: file, log: log, now: time.Now}
	stamp, pool, err := loadPool(file)
	if err != nil {
		return nil, err
	}
	r.cur, r.stamp, r.lastCheck = pool, stamp, r.now()
	return r, nil
}

func loadPool(file string) (fileStamp, *x509.CertPool, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return fileStamp{}, nil, fmt.Errorf("certs: %w", err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return fileStamp{}, nil, fmt.Errorf("certs: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return fileStamp{}, nil, fmt.Errorf("certs: no certificate in %s", file)
	}
	return fileStamp{fi.Size(), fi.ModTime()}, pool, nil
}

func (r *poolReloader) pool() *x509.CertPool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if now.Sub(r.lastCheck) < checkInterval {
		return r.cur
	}
	r.lastCheck = now
	fi, err := os.Stat(r.file)
	if err != nil || (fileStamp{fi.Size(), fi.ModTime()}) == r.stamp {
		return r.cur
	}
	stamp, pool, err := loadPool(r.file)
	if err != nil {
		r.log.Warn("cluster CA file changed but does not load; trusting the previous CA", "ca", r.file, "err", err)
		return r.cur
	}
	r.cur, r.stamp = pool, stamp
	r.log.Info("cluster CA reloaded", "ca", r.file)
	return r.cur
}
