package charttest

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// checkClusterTLS: with clusterTLS (the default) every process gets the
// three flags and its role's Secret (given, or the generated one's files
// of its role mapped to tls.crt and tls.key), and the probes of nodes and
// front-ends (whose admin listener then serves HTTPS only) use HTTPS;
// without it every process gets -plain-cluster, without which it would
// not start. The gossip key reaches the nodes and the front-ends, which
// gossip to count each other.
func checkClusterTLS(t *testing.T, objs []Object, v effective) {
	generated := Find[corev1.Secret](objs, "Secret", "qb-quorumbus-cluster-tls")
	wantGenerated := v.clusterTLS && v.clusterSecrets["node"] == ""
	if (generated != nil) != wantGenerated {
		t.Errorf("generated cluster TLS Secret rendered: %v, want %v", generated != nil, wantGenerated)
	}
	if generated != nil {
		checkGeneratedClusterTLS(t, generated)
	}
	for _, w := range workloads(objs) {
		c := w.template.Spec.Containers[0]
		role := c.Args[0]
		ca := argValue(c.Args, "-cluster-ca")
		if (ca != "") != v.clusterTLS || (argValue(c.Args, "-cluster-tls-cert") != "") != v.clusterTLS {
			t.Errorf("%s: -cluster-ca %q, clusterTLS.enabled %v", w.name, ca, v.clusterTLS)
		}
		if contains(c.Args, "-plain-cluster") == v.clusterTLS {
			t.Errorf("%s: -plain-cluster given: %v, clusterTLS.enabled %v", w.name, !v.clusterTLS, v.clusterTLS)
		}
		if v.clusterTLS {
			secret := v.clusterSecrets[role]
			if generated != nil {
				secret = generated.Name
			}
			if !mountsSecret(w.template.Spec, c, secret, ca) {
				t.Errorf("%s: -cluster-ca %s is not in the mounted Secret %s", w.name, ca, secret)
			}
			if generated != nil {
				checkRoleItems(t, w, role)
			}
		}
		wantScheme := corev1.URISchemeHTTP
		if v.clusterTLS && role != "gateway" {
			wantScheme = corev1.URISchemeHTTPS
		}
		for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
			if p != nil && p.HTTPGet != nil && cmpScheme(p.HTTPGet.Scheme) != wantScheme {
				t.Errorf("%s: probe scheme %q, want %q", w.name, p.HTTPGet.Scheme, wantScheme)
			}
		}
		if role == "gateway" {
			continue // no gossip
		}
		key := argValue(c.Args, "-gossip-key-file")
		if (key != "") != (v.gossipSecret != "") {
			t.Errorf("%s: -gossip-key-file %q, gossip.keySecret %q", w.name, key, v.gossipSecret)
		}
		if key != "" && !mountsSecret(w.template.Spec, c, v.gossipSecret, key) {
			t.Errorf("%s: -gossip-key-file %s is not in the mounted Secret %s", w.name, key, v.gossipSecret)
		}
	}
}

// checkRoleItems: the generated Secret's volume gives the pod its role's
// certificate and key as tls.crt and tls.key, and the CA.
func checkRoleItems(t *testing.T, w workload, role string) {
	want := map[string]string{"ca.crt": "ca.crt", role + ".crt": "tls.crt", role + ".key": "tls.key"}
	for _, vol := range w.template.Spec.Volumes {
		if vol.Name != "cluster-tls" || vol.Secret == nil {
			continue
		}
		got := map[string]string{}
		for _, it := range vol.Secret.Items {
			got[it.Key] = it.Path
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: cluster-tls items %v, want %v", w.name, got, want)
		}
		return
	}
	t.Errorf("%s: no cluster-tls volume", w.name)
}

// checkGeneratedClusterTLS: the generated Secret holds a CA and, for each
// role, a certificate it signed whose Common Name is the role (what the
// processes read as the role when a certificate has no OU), usable to
// serve and to dial, with its key.
func checkGeneratedClusterTLS(t *testing.T, s *corev1.Secret) {
	ca, err := parseCert(s.Data["ca.crt"])
	if err != nil || !ca.IsCA {
		t.Fatalf("generated ca.crt: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, role := range []string{"node", "frontend", "gateway", "cli"} {
		cert, err := parseCert(s.Data[role+".crt"])
		if err != nil {
			t.Errorf("generated %s.crt: %v", role, err)
			continue
		}
		if cert.Subject.CommonName != role || len(cert.Subject.OrganizationalUnit) != 0 {
			t.Errorf("generated %s.crt names %v, want CN=%s and no OU", role, cert.Subject, role)
		}
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("generated %s.crt for usage %v: %v", role, usage, err)
			}
		}
		if _, err := tls.X509KeyPair(s.Data[role+".crt"], s.Data[role+".key"]); err != nil {
			t.Errorf("generated %s.key: %v", role, err)
		}
	}
}

func parseCert(data []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, errors.New("no PEM block")
	}
	return x509.ParseCertificate(b.Bytes)
}

func cmpScheme(s corev1.URIScheme) corev1.URIScheme {
	if s == "" {
		return corev1.URISchemeHTTP
	}
	return s
}

// mountsSecret reports whether the container mounts the Secret at a
// directory that holds path.
func mountsSecret(spec corev1.PodSpec, c corev1.Container, secret, path string) bool {
	for _, vol := range spec.Volumes {
		if vol.Secret == nil || vol.Secret.SecretName != secret {
			continue
		}
		for _, m := range c.VolumeMounts {
			if m.Name == vol.Name && strings.HasPrefix(path, m.MountPath+"/") {
				return true
			}
		}
	}
	return false
}
