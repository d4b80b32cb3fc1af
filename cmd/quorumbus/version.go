package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is the release this binary was built from. The image builder
// (deploy/image) sets it at link time with -ldflags "-X main.version=...",
// from `git describe`; a plain `go build` leaves it empty and the binary
// reports the commit Go stamped into it instead.
var version string

func versionCmd(args []string) error {
	fmt.Printf("quorumbus %s %s/%s %s\n", binaryVersion(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	return nil
}

func binaryVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "devel-" + rev
}
