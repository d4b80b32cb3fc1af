package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotation keys that name the image when a tarball is loaded: the OCI
// spec's ref.name holds the tag (what skopeo and crane write), and
// containerd (docker load since Docker 25) reads its own, the full name.
const (
	AnnotationRefName        = "org.opencontainers.image.ref.name"
	AnnotationContainerdName = "io.containerd.image.name"
)

var tagInvalid = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// Tag turns a version (`git describe` output) into a valid image tag.
func Tag(version string) string {
	t := tagInvalid.ReplaceAllString(version, "-")
	if t == "" || t[0] == '.' || t[0] == '-' {
		t = "v" + t
	}
	if len(t) > 128 {
		t = t[:128]
	}
	return t
}

// dockerManifest is one entry of the manifest.json that `docker save`
// writes and docker's loader (and go-containerregistry's tarball package,
// which `crane push FILE` uses) reads.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// WriteTarball writes idx as an OCI image layout in a tar stream: the
// oci-layout marker, every blob once under blobs/sha256/, and index.json
// naming idx as repository:tag. It also writes a docker-style
// manifest.json for the image of dockerPlatform (its layers and config
// are the same blobs), so that tools that know only `docker save`'s
// format load that platform. Entries have fixed times: the same index
// gives the same tarball.
func WriteTarball(w io.Writer, idx v1.ImageIndex, repository, tag string, dockerPlatform v1.Platform) error {
	tw := tar.NewWriter(w)
	mtime := time.Unix(0, 0).UTC()
	written := map[v1.Hash]bool{}
	put := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	blob := func(h v1.Hash, size int64, open func() (io.ReadCloser, error)) error {
		if written[h] {
			return nil
		}
		written[h] = true
		rc, err := open()
		if err != nil {
			return err
		}
		defer rc.Close()
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: blobPath(h), Mode: 0o644, Size: size, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		n, err := io.Copy(tw, rc)
		if err == nil && n != size {
			err = fmt.Errorf("ociimage: blob %s has %d bytes, its descriptor says %d", h, n, size)
		}
		return err
	}
	bytesBlob := func(data []byte) (v1.Hash, error) {
		h, _, err := v1.SHA256(bytes.NewReader(data))
		if err != nil {
			return h, err
		}
		return h, blob(h, int64(len(data)), func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	}

	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	var docker []dockerManifest
	for _, desc := range im.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return err
		}
		layers, err := img.Layers()
		if err != nil {
			return err
		}
		var layerPaths []string
		for _, l := range layers {
			h, err := l.Digest()
			if err != nil {
				return err
			}
			size, err := l.Size()
			if err != nil {
				return err
			}
			if err := blob(h, size, l.Compressed); err != nil {
				return err
			}
			layerPaths = append(layerPaths, blobPath(h))
		}
		rawConfig, err := img.RawConfigFile()
		if err != nil {
			return err
		}
		cfgHash, err := bytesBlob(rawConfig)
		if err != nil {
			return err
		}
		rawManifest, err := img.RawManifest()
		if err != nil {
			return err
		}
		if _, err := bytesBlob(rawManifest); err != nil {
			return err
		}
		if desc.Platform != nil && desc.Platform.Satisfies(dockerPlatform) && docker == nil {
			docker = append(docker, dockerManifest{Config: blobPath(cfgHash), RepoTags: []string{repository + ":" + tag}, Layers: layerPaths})
		}
	}
	rawIndex, err := idx.RawManifest()
	if err != nil {
		return err
	}
	idxHash, err := bytesBlob(rawIndex)
	if err != nil {
		return err
	}
	mt, err := idx.MediaType()
	if err != nil {
		return err
	}
	top := v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: mt,
			Digest:    idxHash,
			Size:      int64(len(rawIndex)),
			Annotations: map[string]string{
				AnnotationRefName:        tag,
				AnnotationContainerdName: repository + ":" + tag,
			},
		}},
	}
	for _, f := range []struct {
		name string
		v    any
	}{
		{"oci-layout", map[string]string{"imageLayoutVersion": "1.0.0"}},
		{"index.json", top},
		{"manifest.json", docker},
	} {
		if f.name == "manifest.json" && docker == nil {
			continue
		}
		data, err := json.Marshal(f.v)
		if err != nil {
			return err
		}
		if err := put(f.name, data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// HostPlatform is the platform of the machine running this code, the one
// docker load picks by default.
func HostPlatform() v1.Platform {
	p := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	if p.Architecture == "arm64" {
		p.Variant = "v8"
	}
	return p
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
