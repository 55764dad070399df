package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/raftlog/raftlog/node"
)

// versionJSON is what version --json prints.
type versionJSON struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

// cmdVersion is "node version", also run as "node --version".
func cmdVersion(ctx context.Context, e *env, args []string) error {
	var asJSON bool
	fs := newFlagSet(e, "version", "", `
Prints the version of raftlog the binary was built from (a release such as
v1.2.0, a pseudo-version naming the commit for a build from a source tree,
or "(devel)" when the build recorded none), the commit and whether the tree
had uncommitted changes, and the Go version and platform it was built with.
'node status' shows the same for every running node.`)
	fs.BoolVar(&asJSON, "json", false, "print a JSON object instead")
	rest, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(rest); err != nil {
		return err
	}
	b := node.Build()
	if asJSON {
		return json.NewEncoder(e.stdout).Encode(versionJSON{
			Version: b.Version, Commit: b.Commit, Modified: b.Modified, GoVersion: b.GoVersion, Platform: b.Platform,
		})
	}
	commit := b.Commit
	switch {
	case commit == "":
		commit = "unknown"
	case b.Modified:
		commit += " (modified)"
	}
	_, err = fmt.Fprintf(e.stdout, "version:  %s\ncommit:   %s\ngo:       %s\nplatform: %s\n", b.Version, commit, b.GoVersion, b.Platform)
	return err
}
