package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	cranecmd "github.com/google/go-containerregistry/cmd/crane/cmd"
	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/quorumbus/quorumbus/deploy/image/ociimage"
)

const testVersion = "v0.0.0-imagetest"

// TestImage builds the image as `make image` does (both platforms
// cross-compiled), opens the tarball with go-containerregistry, checks
// every platform's config and layer, pushes it with crane to a registry
// in the test, and runs the host platform's binary taken out of its
// layer: `version`, then `dev` until its /readyz answers.
func TestImage(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "quorumbus.tar")
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	start := time.Now()
	if err := run(context.Background(), []string{"-root", root, "-out", out, "-version", testVersion}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built in %s: %.1f MB", time.Since(start).Round(time.Second), float64(st.Size())/1e6)

	layoutDir := filepath.Join(dir, "layout")
	untar(t, out, layoutDir)
	top, err := layout.ImageIndexFromPath(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	topManifest, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(topManifest.Manifests) != 1 || topManifest.Manifests[0].Annotations[ociimage.AnnotationRefName] != testVersion {
		t.Fatalf("index.json: %+v", topManifest.Manifests)
	}
	idx, err := top.ImageIndex(topManifest.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	var hostBinary []byte
	for _, desc := range im.Manifests {
		p := desc.Platform
		platforms = append(platforms, p.String())
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		bin := checkImage(t, img, *p)
		if p.Satisfies(ociimage.HostPlatform()) {
			hostBinary = bin
		}
	}
	if got := strings.Join(platforms, ","); got != "linux/amd64,linux/arm64/v8" {
		t.Errorf("platforms %s, want linux/amd64,linux/arm64/v8", got)
	}

	// docker load's legacy path and `crane push FILE` read manifest.json.
	tag, _ := name.NewTag("quorumbus:" + testVersion)
	dockerImg, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatalf("the tarball as a docker archive: %v", err)
	}
	dcfg, err := dockerImg.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if dcfg.Architecture != runtime.GOARCH {
		t.Errorf("manifest.json describes %s, this machine is %s", dcfg.Architecture, runtime.GOARCH)
	}

	pushWithCrane(t, layoutDir, out, idx)

	if hostBinary == nil {
		t.Skipf("no image for this machine's platform %s to run", ociimage.HostPlatform())
	}
	runBinary(t, dir, hostBinary)
}

// checkImage checks one platform's config and layer and returns its binary.
func checkImage(t *testing.T, img v1.Image, p v1.Platform) []byte {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.OS != p.OS || cf.Architecture != p.Architecture {
		t.Errorf("%s: config says %s/%s", p, cf.OS, cf.Architecture)
	}
	if len(c.Entrypoint) != 1 || c.Entrypoint[0] != ociimage.BinaryPath {
		t.Errorf("%s: entrypoint %q: want the binary itself, no shell", p, c.Entrypoint)
	}
	if c.User == "" || c.User == "0" || strings.HasPrefix(c.User, "0:") || strings.HasPrefix(c.User, "root") {
		t.Errorf("%s: user %q is root", p, c.User)
	}
	if c.WorkingDir != ociimage.DataDir {
		t.Errorf("%s: working dir %q", p, c.WorkingDir)
	}
	for k, want := range map[string]string{
		ociimage.LabelVersion: testVersion, ociimage.LabelSource: "https://github.com/quorumbus/quorumbus", ociimage.LabelLicenses: "NOASSERTION",
	} {
		if c.Labels[k] != want {
			t.Errorf("%s: label %s = %q, want %q", p, k, c.Labels[k], want)
		}
	}
	if c.Labels[ociimage.LabelRevision] == "" {
		t.Errorf("%s: no revision label", p)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%s: %d layers (%v), want one", p, len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]*tar.Header{}
	var binary []byte
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files["/"+strings.TrimSuffix(h.Name, "/")] = h
		if "/"+h.Name == ociimage.BinaryPath {
			if binary, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, shell := range []string{"/bin/sh", "/bin/bash", "/bin/busybox", "/usr/bin/sh"} {
		if files[shell] != nil {
			t.Errorf("%s: has %s", p, shell)
		}
	}
	if h := files[ociimage.DataDir]; h == nil || h.Uid != ociimage.UID {
		t.Errorf("%s: data dir missing or not the user's", p)
	}
	if h := files[ociimage.CACertPath]; h == nil || h.Size < 10000 {
		t.Errorf("%s: CA certificates missing", p)
	}
	if binary == nil {
		t.Fatalf("%s: no %s in the layer", p, ociimage.BinaryPath)
	}
	f, err := elf.NewFile(bytes.NewReader(binary))
	if err != nil {
		t.Fatalf("%s: binary is not ELF: %v", p, err)
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[p.Architecture]
	if f.Machine != want {
		t.Errorf("%s: binary for %s", p, f.Machine)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Errorf("%s: binary is dynamically linked: it would need a loader the image lacks", p)
		}
	}
	return binary
}

// pushWithCrane runs crane's own push command, as an operator would, for
// the extracted layout (the multi-platform index) and for the tarball
// (docker-style, one platform), to a registry served by the test.
func pushWithCrane(t *testing.T, layoutDir, tarPath string, idx v1.ImageIndex) {
	t.Helper()
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	push := func(args ...string) string {
		opts := []crane.Option{crane.Insecure}
		cmd := cranecmd.NewCmdPush(&opts)
		var stdout bytes.Buffer
		cmd.SetOut(&stdout)
		cmd.SetErr(io.Discard)
		cmd.SetArgs(args)
		if err := cmd.Execute(); err != nil {
			t.Fatalf("crane push %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(stdout.String())
	}
	ref := host + "/quorumbus:" + testVersion
	push(layoutDir, ref)
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Index(r)
	if err != nil {
		t.Fatalf("pulling the pushed index: %v", err)
	}
	want, _ := idx.Digest()
	if got, _ := pulled.Digest(); got != want {
		t.Errorf("pushed index %s, built %s", got, want)
	}
	if out := push(tarPath, host+"/quorumbus:single"); !strings.Contains(out, "@sha256:") {
		t.Errorf("crane push of the tarball printed %q", out)
	}
}

// runBinary runs the binary out of the layer: `version`, then `dev` until
// /readyz answers 200.
func runBinary(t *testing.T, dir string, binary []byte) {
	t.Helper()
	path := filepath.Join(dir, "quorumbus")
	if err := os.WriteFile(path, binary, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), testVersion) {
		t.Fatalf("quorumbus --version: %v: %s", err, out)
	}
	httpAddr, amqpAddr := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dev := exec.Command(path, "dev", "-data", filepath.Join(dir, "data"), "-http-addr", httpAddr, "-amqp-addr", amqpAddr,
		"-node-port", "0", "-cache-mb", "8", "-groups", "1", "-log-level", "warn")
	var log bytes.Buffer
	dev.Stdout, dev.Stderr = &log, &log
	dev.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- dev.Wait() }()
	defer func() {
		_ = dev.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = dev.Process.Kill()
			<-done
		}
	}()
	for {
		select {
		case err := <-done:
			t.Fatalf("quorumbus dev exited: %v\n%s", err, log.String())
		case <-ctx.Done():
			t.Fatalf("quorumbus dev not ready within 90s\n%s", log.String())
		case <-time.After(250 * time.Millisecond):
		}
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func untar(t *testing.T, path, dir string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, 0o755)
		case tar.TypeReg:
			if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
				var data []byte
				if data, err = io.ReadAll(tr); err == nil {
					err = os.WriteFile(target, data, 0o644)
				}
			}
		default:
			t.Fatalf("unexpected entry %s (type %c)", h.Name, h.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
