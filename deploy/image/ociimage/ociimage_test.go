package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func testConfig() Config {
	return Config{
		Version: "v1.2.3-4-gabcdef", Revision: "abcdef", Source: "https://example.com/q", Licenses: "NOASSERTION",
		Created: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC),
		CACerts: []byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"),
		Binaries: []Binary{
			{Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, Data: []byte("amd64 binary")},
			{Platform: v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}, Data: []byte("arm64 binary")},
		},
	}
}

// TestIndexIsReproducible: the same inputs give the same digests, and a
// different binary a different one.
func TestIndexIsReproducible(t *testing.T) {
	a, err := Index(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	b, err := Index(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Fatalf("two builds of the same inputs: %s and %s", da, db)
	}
	c := testConfig()
	c.Binaries[0].Data = []byte("another amd64 binary")
	other, err := Index(c)
	if err != nil {
		t.Fatal(err)
	}
	if dc, _ := other.Digest(); dc == da {
		t.Fatal("a different binary gave the same index digest")
	}
	var ta, tb bytes.Buffer
	if err := WriteTarball(&ta, a, "quorumbus", "t", HostPlatform()); err != nil {
		t.Fatal(err)
	}
	if err := WriteTarball(&tb, b, "quorumbus", "t", HostPlatform()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ta.Bytes(), tb.Bytes()) {
		t.Fatal("two tarballs of the same index differ")
	}
}

func TestConfigValidate(t *testing.T) {
	for name, mutate := range map[string]func(*Config){
		"no version":       func(c *Config) { c.Version = "" },
		"no certificates":  func(c *Config) { c.CACerts = nil },
		"no binaries":      func(c *Config) { c.Binaries = nil },
		"empty binary":     func(c *Config) { c.Binaries[1].Data = nil },
		"platform twice":   func(c *Config) { c.Binaries[1].Platform = c.Binaries[0].Platform },
		"no creation time": func(c *Config) { c.Created = time.Time{} },
		"no architecture":  func(c *Config) { c.Binaries[0].Platform.Architecture = "" },
	} {
		c := testConfig()
		mutate(&c)
		if _, err := Index(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestRootFS: the layer holds what a static binary running as the
// non-root user needs, and nothing that would give it a shell.
func TestRootFS(t *testing.T) {
	layer, err := rootFS(testConfig(), []byte("binary"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*tar.Header{}
	contents := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = h
		b, _ := io.ReadAll(tr)
		contents[h.Name] = string(b)
	}
	for _, tc := range []struct {
		name     string
		mode     int64
		uid, gid int
	}{
		{"usr/local/bin/quorumbus", 0o755, 0, 0},
		{"etc/ssl/certs/ca-certificates.crt", 0o644, 0, 0},
		{"etc/passwd", 0o644, 0, 0},
		{"etc/group", 0o644, 0, 0},
		{"var/lib/quorumbus/", 0o750, UID, GID},
		{"home/nonroot/", 0o700, UID, GID},
		{"tmp/", 0o1777, 0, 0},
	} {
		h := files[tc.name]
		if h == nil {
			t.Errorf("%s missing", tc.name)
			continue
		}
		if h.Mode != tc.mode || h.Uid != tc.uid || h.Gid != tc.gid {
			t.Errorf("%s: mode %o owner %d:%d, want %o %d:%d", tc.name, h.Mode, h.Uid, h.Gid, tc.mode, tc.uid, tc.gid)
		}
	}
	for name := range files {
		if strings.HasPrefix(name, "bin/") || strings.HasSuffix(name, "/sh") {
			t.Errorf("%s: the image needs no shell", name)
		}
	}
	if !strings.Contains(contents["etc/passwd"], "nonroot:x:65532:65532:") || !strings.Contains(contents["etc/group"], "nonroot:x:65532:") {
		t.Errorf("passwd/group lack the non-root user:\n%s%s", contents["etc/passwd"], contents["etc/group"])
	}
}

// TestTarballLayout: the tarball has the OCI layout's marker and
// index.json naming the image, and a docker manifest.json for the host
// platform whose blobs are in the tarball.
func TestTarballLayout(t *testing.T) {
	idx, err := Index(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteTarball(&buf, idx, "quorumbus", "v1", v1.Platform{OS: "linux", Architecture: "arm64"}); err != nil {
		t.Fatal(err)
	}
	entries := map[string][]byte{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		entries[h.Name] = b
	}
	if string(entries["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout: %s", entries["oci-layout"])
	}
	var top v1.IndexManifest
	if err := json.Unmarshal(entries["index.json"], &top); err != nil {
		t.Fatal(err)
	}
	d, _ := idx.Digest()
	if len(top.Manifests) != 1 || top.Manifests[0].Digest != d || top.Manifests[0].Annotations[AnnotationRefName] != "v1" ||
		top.Manifests[0].Annotations[AnnotationContainerdName] != "quorumbus:v1" {
		t.Errorf("index.json: %s", entries["index.json"])
	}
	var docker []dockerManifest
	if err := json.Unmarshal(entries["manifest.json"], &docker); err != nil {
		t.Fatal(err)
	}
	if len(docker) != 1 || docker[0].RepoTags[0] != "quorumbus:v1" {
		t.Fatalf("manifest.json: %s", entries["manifest.json"])
	}
	var cfg v1.ConfigFile
	if err := json.Unmarshal(entries[docker[0].Config], &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Architecture != "arm64" {
		t.Errorf("manifest.json describes %s, asked for arm64", cfg.Architecture)
	}
	for _, l := range docker[0].Layers {
		if entries[l] == nil {
			t.Errorf("manifest.json names %s, which is not in the tarball", l)
		}
	}
}

func TestTag(t *testing.T) {
	for in, want := range map[string]string{
		"v1.2.3":                 "v1.2.3",
		"076986a-dirty":          "076986a-dirty",
		"v1.0.0+build.5":         "v1.0.0-build.5",
		"-x":                     "v-x",
		"":                       "v",
		strings.Repeat("a", 200): strings.Repeat("a", 128),
	} {
		if got := Tag(in); got != want {
			t.Errorf("Tag(%q) = %q, want %q", in, got, want)
		}
	}
}
