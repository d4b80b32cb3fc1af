// Command image builds the quorumbus container image without a container
// engine: it cross-compiles the static binary of ./cmd/quorumbus for each
// platform, assembles one image per platform and an index over them
// (deploy/image/ociimage), and writes an OCI image-layout tarball.
//
//	cd deploy && go run ./image -root .. -out ../bin/quorumbus-image.tar
//
// `make image` runs it. The tarball loads with `docker load -i`, `podman
// load -i`, and pushes with crane (docs/operations.md).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/quorumbus/quorumbus/deploy/image/ociimage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

// options are the program's flags.
type options struct {
	root, out, version, platforms, source, licenses, caCerts, repository, dockerPlatform string
}

func run(ctx context.Context, args []string) error {
	var o options
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.StringVar(&o.root, "root", "..", "the quorumbus repository (its go.mod and cmd/quorumbus)")
	fs.StringVar(&o.out, "out", "quorumbus-image.tar", "the OCI image-layout tarball to write")
	fs.StringVar(&o.version, "version", "", "image version and tag (default: `git describe --tags --always --dirty` in -root)")
	fs.StringVar(&o.platforms, "platforms", "linux/amd64,linux/arm64", "comma-separated os/arch[/variant] to build")
	fs.StringVar(&o.source, "source", "https://github.com/quorumbus/quorumbus", "org.opencontainers.image.source label")
	// No licence file is committed yet; NOASSERTION is SPDX for "not stated".
	fs.StringVar(&o.licenses, "licenses", "NOASSERTION", "org.opencontainers.image.licenses label (an SPDX expression)")
	fs.StringVar(&o.caCerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "PEM bundle of CA certificates to install")
	fs.StringVar(&o.repository, "repository", "quorumbus", "the image name the tarball gives its tag (docker load, podman load)")
	fs.StringVar(&o.dockerPlatform, "docker-platform", ociimage.HostPlatform().String(), "platform described by the tarball's docker-style manifest.json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return build(ctx, o)
}

func build(ctx context.Context, o options) error {
	root, err := filepath.Abs(o.root)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "quorumbus")); err != nil {
		return fmt.Errorf("-root %s is not the quorumbus repository: %w", o.root, err)
	}
	cfg := ociimage.Config{Version: o.version, Source: o.source, Licenses: o.licenses}
	if cfg.Version == "" {
		if cfg.Version, err = git(ctx, root, "describe", "--tags", "--always", "--dirty"); err != nil {
			return fmt.Errorf("version from git describe: %w (give -version)", err)
		}
	}
	cfg.Created = time.Unix(0, 0).UTC()
	if rev, err := git(ctx, root, "rev-parse", "HEAD"); err == nil {
		cfg.Revision = rev
		if ct, err := git(ctx, root, "log", "-1", "--format=%ct"); err == nil {
			if sec, err := strconv.ParseInt(ct, 10, 64); err == nil {
				cfg.Created = time.Unix(sec, 0).UTC()
			}
		}
	}
	if cfg.CACerts, err = os.ReadFile(o.caCerts); err != nil {
		return fmt.Errorf("CA certificates: %w (Debian: apt-get install ca-certificates)", err)
	}
	dockerPlatform, err := v1.ParsePlatform(o.dockerPlatform)
	if err != nil {
		return fmt.Errorf("-docker-platform: %w", err)
	}
	tmp, err := os.MkdirTemp("", "quorumbus-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, ps := range strings.Split(o.platforms, ",") {
		p, err := v1.ParsePlatform(strings.TrimSpace(ps))
		if err != nil {
			return fmt.Errorf("-platforms: %w", err)
		}
		if p.Architecture == "arm64" && p.Variant == "" {
			p.Variant = "v8"
		}
		bin := filepath.Join(tmp, "quorumbus-"+p.OS+"-"+p.Architecture)
		if err := compile(ctx, root, *p, cfg.Version, bin); err != nil {
			return err
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			return err
		}
		cfg.Binaries = append(cfg.Binaries, ociimage.Binary{Platform: *p, Data: data})
	}
	idx, err := ociimage.Index(cfg)
	if err != nil {
		return err
	}
	if err := writeFile(o.out, func(w *bufio.Writer) error {
		return ociimage.WriteTarball(w, idx, o.repository, ociimage.Tag(cfg.Version), *dockerPlatform)
	}); err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("image %s:%s (%s), index %s, written to %s\n", o.repository, ociimage.Tag(cfg.Version), o.platforms, digest, o.out)
	return nil
}

// compile builds a static binary: CGO_ENABLED=0, no paths of this machine
// in it, symbols stripped, the version linked in.
func compile(ctx context.Context, root string, p v1.Platform, version, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath",
		"-ldflags", "-s -w -X main.version="+version, "-o", out, "./cmd/quorumbus")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture, "GOFLAGS=-mod=readonly")
	if p.Architecture == "arm" && p.Variant != "" {
		cmd.Env = append(cmd.Env, "GOARM="+strings.TrimPrefix(p.Variant, "v"))
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s: %w", p, err)
	}
	return nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// writeFile writes through a temporary file renamed into place, so a
// failed build never leaves a truncated tarball under the final name.
func writeFile(path string, write func(*bufio.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	w := bufio.NewWriterSize(f, 1<<20)
	if err := write(w); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	// CreateTemp makes the file private; the image is not a secret.
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
