// Package ociimage assembles the quorumbus container image without a
// container engine: one layer holding the static binary, CA certificates,
// the passwd/group entries of a non-root user and an empty data
// directory, on an empty base, per platform; an index over the platforms;
// and an OCI image-layout tarball of it that docker load, podman load and
// crane accept.
//
// Everything is a pure function of its inputs (the binaries, the
// certificates, the version and the timestamp): the same inputs give the
// same digests, so a rebuild of a release can be compared byte for byte.
package ociimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Paths and ids inside the image. The chart (deploy/helm/quorumbus)
// mounts its volumes at DataDir and runs as UID/GID, so they change
// together.
const (
	BinaryPath = "/usr/local/bin/quorumbus"
	DataDir    = "/var/lib/quorumbus"
	CACertPath = "/etc/ssl/certs/ca-certificates.crt"
	UID        = 65532
	GID        = 65532
	UserName   = "nonroot"
)

// Label keys of the OCI image spec's pre-defined annotations, used as
// config labels (what `docker inspect` shows) and as manifest annotations.
const (
	LabelVersion  = "org.opencontainers.image.version"
	LabelSource   = "org.opencontainers.image.source"
	LabelLicenses = "org.opencontainers.image.licenses"
	LabelRevision = "org.opencontainers.image.revision"
	LabelTitle    = "org.opencontainers.image.title"
	LabelCreated  = "org.opencontainers.image.created"
)

// Binary is the quorumbus executable for one platform.
type Binary struct {
	Platform v1.Platform // OS, Architecture, and Variant for arm64 ("v8")
	Data     []byte      // a static (CGO_ENABLED=0) build
}

// Config describes one image build.
type Config struct {
	Version  string    // `git describe`; also the tag the tarball names
	Revision string    // the full commit id
	Source   string    // the repository's URL
	Licenses string    // an SPDX expression
	Created  time.Time // the commit's time, so rebuilds are reproducible
	CACerts  []byte    // a PEM bundle, installed at CACertPath
	Binaries []Binary  // one per platform, in the index's order
}

// Validate reports what is missing.
func (c Config) Validate() error {
	switch {
	case c.Version == "":
		return errors.New("ociimage: no version")
	case len(c.CACerts) == 0:
		return errors.New("ociimage: no CA certificates")
	case len(c.Binaries) == 0:
		return errors.New("ociimage: no binaries")
	case c.Created.IsZero():
		return errors.New("ociimage: no creation time")
	}
	seen := map[string]bool{}
	for _, b := range c.Binaries {
		p := b.Platform.String()
		if b.Platform.OS == "" || b.Platform.Architecture == "" {
			return fmt.Errorf("ociimage: a binary without OS and architecture (%q)", p)
		}
		if len(b.Data) == 0 {
			return fmt.Errorf("ociimage: the %s binary is empty", p)
		}
		if seen[p] {
			return fmt.Errorf("ociimage: two binaries for %s", p)
		}
		seen[p] = true
	}
	return nil
}

// Labels are the config labels every platform's image carries.
func (c Config) Labels() map[string]string {
	l := map[string]string{
		LabelTitle:   "quorumbus",
		LabelVersion: c.Version,
		LabelCreated: c.Created.UTC().Format(time.RFC3339),
	}
	for k, v := range map[string]string{LabelSource: c.Source, LabelLicenses: c.Licenses, LabelRevision: c.Revision} {
		if v != "" {
			l[k] = v
		}
	}
	return l
}

// Index builds the multi-platform image index.
func Index(c Config) (v1.ImageIndex, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	idx = mutate.Annotations(idx, c.annotations()).(v1.ImageIndex)
	for _, b := range c.Binaries {
		img, err := Image(c, b)
		if err != nil {
			return nil, err
		}
		p := b.Platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &p, Annotations: c.annotations()},
		})
	}
	return idx, nil
}

func (c Config) annotations() map[string]string {
	a := c.Labels()
	delete(a, LabelTitle)
	return a
}

// Image builds the image of one platform.
func Image(c Config, b Binary) (v1.Image, error) {
	layerTar, err := rootFS(c, b.Data)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: c.Created},
			CreatedBy: "quorumbus deploy/image: static binary, CA certificates, user " + UserName,
			Comment:   "built without a container engine (go-containerregistry)",
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant, cf.OSVersion = b.Platform.OS, b.Platform.Architecture, b.Platform.Variant, b.Platform.OSVersion
	cf.Created = v1.Time{Time: c.Created}
	cf.Author = "quorumbus"
	cf.Config = ContainerConfig(c)
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, c.annotations()).(v1.Image), nil
}

// ContainerConfig is what the runtime uses: the binary as entrypoint (no
// shell anywhere in the image), the non-root user, and a default command
// that runs a whole dev cluster reachable from outside the container. The
// chart replaces the command with `node` or `frontend` and their flags.
func ContainerConfig(c Config) v1.Config {
	return v1.Config{
		User:       fmt.Sprintf("%d:%d", UID, GID),
		Entrypoint: []string{BinaryPath},
		Cmd:        []string{"dev", "-data", DataDir, "-amqp-addr", "0.0.0.0:5672", "-http-addr", "0.0.0.0:5300"},
		WorkingDir: DataDir,
		Env:        []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=" + CACertPath},
		ExposedPorts: map[string]struct{}{
			"5672/tcp": {}, // AMQP
			"5300/tcp": {}, // admin HTTP: /healthz, /readyz
		},
		Volumes:    map[string]struct{}{DataDir: {}},
		Labels:     c.Labels(),
		StopSignal: "SIGTERM",
	}
}

// rootFS is the layer: every directory the files need, owned by root
// except the user's home and the data directory, with fixed times.
func rootFS(c Config, binary []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := c.Created.UTC()
	dir := func(name string, mode int64, uid, gid int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: gid, ModTime: mtime, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/home/%s:/sbin/nologin\n", UserName, UID, GID, UserName, UserName)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", UserName, GID)
	steps := []func() error{
		func() error { return dir("etc", 0o755, 0, 0) },
		func() error { return file("etc/group", 0o644, []byte(group)) },
		// Go's resolver reads it; without it glibc-less lookups still try
		// files first, but say so rather than rely on a default.
		func() error { return file("etc/nsswitch.conf", 0o644, []byte("hosts: files dns\n")) },
		func() error { return file("etc/passwd", 0o644, []byte(passwd)) },
		func() error { return dir("etc/ssl", 0o755, 0, 0) },
		func() error { return dir("etc/ssl/certs", 0o755, 0, 0) },
		func() error { return file(CACertPath[1:], 0o644, c.CACerts) },
		func() error { return dir("home", 0o755, 0, 0) },
		func() error { return dir("home/"+UserName, 0o700, UID, GID) },
		func() error { return dir("root", 0o700, 0, 0) },
		func() error { return dir("tmp", 0o1777, 0, 0) },
		func() error { return dir("usr", 0o755, 0, 0) },
		func() error { return dir("usr/local", 0o755, 0, 0) },
		func() error { return dir("usr/local/bin", 0o755, 0, 0) },
		func() error { return file(BinaryPath[1:], 0o755, binary) },
		func() error { return dir("var", 0o755, 0, 0) },
		func() error { return dir("var/lib", 0o755, 0, 0) },
		func() error { return dir(DataDir[1:], 0o750, UID, GID) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
