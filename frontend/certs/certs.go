// Package certs serves TLS certificates from files for the AMQPS and HTTPS
// listeners: a certificate and key re-read when they change on disk (as
// cert-manager rotates them in a Kubernetes secret), and, for dev mode, a
// self-signed CA and a server certificate it signed. Standard library only.
package certs

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// checkInterval bounds how often a handshake looks at the files: a
// rotation is served within it, and a flood of handshakes costs one stat
// pair per interval.
const checkInterval = time.Second

// Reloader serves the certificate and key of two PEM files, re-reading
// them when either changes. A pair that fails to load (a rotation caught
// half-written) keeps the previous one in service until a good pair
// appears.
type Reloader struct {
	certFile, keyFile string
	log               *slog.Logger
	now               func() time.Time

	mu        sync.Mutex
	cert      *tls.Certificate
	stamp     [2]fileStamp
	lastCheck time.Time
}

// fileStamp tells whether a file changed: a rotation by rename (what
// Kubernetes does with its ..data symlink) changes the size, the time or both.
type fileStamp struct {
	size int64
	mod  time.Time
}

// NewReloader loads the pair once; an error means it cannot serve at all.
func NewReloader(certFile, keyFile string, log *slog.Logger) (*Reloader, error) {
	if log == nil {
		log = slog.Default()
	}
	r := &Reloader{certFile: certFile, keyFile: keyFile, log: log, now: time.Now}
	stamp, err := r.stat()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	r.cert, r.stamp, r.lastCheck = &cert, stamp, r.now()
	return r, nil
}

func (r *Reloader) stat() ([2]fileStamp, error) {
	var s [2]fileStamp
	for i, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return s, fmt.Errorf("certs: %w", err)
		}
		s[i] = fileStamp{fi.Size(), fi.ModTime()}
	}
	return s, nil
}

// GetCertificate is tls.Config.GetCertificate: the current pair, re-read
// first when the files changed.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if now.Sub(r.lastCheck) < checkInterval {
		return r.cert, nil
	}
	r.lastCheck = now
	stamp, err := r.stat()
	if err != nil || stamp == r.stamp {
		return r.cert, nil // a file gone for a moment during a rotation: keep serving
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		r.log.Warn("TLS certificate files changed but do not load; serving the previous certificate", "cert", r.certFile, "err", err)
		return r.cert, nil
	}
	r.cert, r.stamp = &cert, stamp
	r.log.Info("TLS certificate reloaded", "cert", r.certFile)
	return r.cert, nil
}

// TLSConfig is a server configuration serving the reloaded pair, TLS 1.2
// or later (what the SDKs speak).
func (r *Reloader) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}
}

// samePEM reports whether a file holds exactly these bytes.
func samePEM(path string, data []byte) bool {
	cur, err := os.ReadFile(path)
	return err == nil && bytes.Equal(cur, data)
}
