package cluster

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"os"

	"github.com/quorumbus/quorumbus/frontend/certs"
)

// ListenTLS listens on addr for TLS connections with the certificate and
// key files, re-read when they change (certs.Reloader). The handshake
// happens on a connection's first read, in its own goroutine, within the
// AMQP engine's idle timeout: a peer that sends garbage or nothing holds
// one connection for that long at most.
func ListenTLS(addr, certFile, keyFile string, log *slog.Logger) (net.Listener, error) {
	cfg, err := ServerTLS(certFile, keyFile, log)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return tls.NewListener(ln, cfg), nil
}

// ServerTLS is the configuration of a server that presents the
// certificate and key in the files, re-read when they change
// (certs.Reloader).
func ServerTLS(certFile, keyFile string, log *slog.Logger) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("a TLS listener needs both a certificate and a key file")
	}
	r, err := certs.NewReloader(certFile, keyFile, log)
	if err != nil {
		return nil, err
	}
	return r.TLSConfig(), nil
}

// extraHosts are the names, besides localhost and loopback, a dev
// certificate covers: the TLS listener's host when it names one, and the
// machine's name.
func extraHosts(addr string) []string {
	var hosts []string
	if h, _, err := net.SplitHostPort(addr); err == nil && h != "" {
		if ip := net.ParseIP(h); ip == nil || !ip.IsUnspecified() {
			hosts = append(hosts, h)
		}
	}
	if name, err := os.Hostname(); err == nil && name != "" {
		hosts = append(hosts, name)
	}
	return hosts
}
