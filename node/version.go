package node

import (
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"github.com/raftlog/raftlog/transport"
)

// ModulePath is the path of the raftlog module, whose version Build
// reports.
const ModulePath = "github.com/raftlog/raftlog"

// linkVersion and linkCommit, when set at link time, replace the version
// and the commit that the build info holds; builds from a source tree
// without its .git directory (the Dockerfile's) set them:
//
//	go build -ldflags "-X github.com/raftlog/raftlog/node.linkVersion=v1.2.0 -X github.com/raftlog/raftlog/node.linkCommit=bd96097" ./cmd/node
//
// Only the linker writes them.
var linkVersion, linkCommit string

// BuildInfo describes the binary a node runs.
type BuildInfo struct {
	// Version is the raftlog module version: a release ("v1.2.0"), a
	// pseudo-version naming the commit that go build derives from the
	// source tree ("v0.0.0-20260509183000-bd96097abcde+dirty"), or
	// "(devel)" when the build recorded none.
	Version string
	// Commit is the revision of the source tree (vcs.revision), empty when
	// the build recorded none: a binary built by "go install module@version"
	// or from a tree without version control. Only a binary whose main
	// module is raftlog's (cmd/node) has one.
	Commit string
	// Modified says the source tree had uncommitted changes
	// (vcs.modified).
	Modified bool
	// GoVersion is the Go toolchain that built the binary ("go1.26.8").
	GoVersion string
	// Platform is GOOS/GOARCH ("linux/amd64").
	Platform string
}

// String returns b in one line: "v1.2.0 (commit bd96097, modified) go1.26.8 linux/amd64".
func (b BuildInfo) String() string {
	var s strings.Builder
	s.WriteString(b.Version)
	if b.Commit != "" {
		s.WriteString(" (commit ")
		s.WriteString(b.Commit)
		if b.Modified {
			s.WriteString(", modified")
		}
		s.WriteString(")")
	}
	s.WriteString(" ")
	s.WriteString(b.GoVersion)
	s.WriteString(" ")
	s.WriteString(b.Platform)
	return s.String()
}

// Build describes the running binary, from the build information the Go
// toolchain embeds in it (runtime/debug.ReadBuildInfo): the version of the
// raftlog module, whether it is the main module (cmd/node) or a dependency
// of an embedder, and the commit when the build recorded one.
func Build() BuildInfo { return build() }

var build = sync.OnceValue(func() BuildInfo {
	bi, ok := debug.ReadBuildInfo()
	return readBuild(bi, ok, linkVersion, linkCommit)
})

// readBuild returns what Build reports for the build information bi (ok
// false: none) and the link-time version and commit (empty: not set).
func readBuild(bi *debug.BuildInfo, ok bool, version, commit string) BuildInfo {
	b := BuildInfo{GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if ok && bi != nil {
		if bi.GoVersion != "" {
			b.GoVersion = bi.GoVersion
		}
		if bi.Main.Path == ModulePath {
			b.Version = bi.Main.Version
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					b.Commit = s.Value
				case "vcs.modified":
					b.Modified = s.Value == "true"
				}
			}
		} else {
			for _, d := range bi.Deps {
				if d.Path == ModulePath {
					b.Version = d.Version
					if d.Replace != nil && d.Replace.Version != "" {
						b.Version = d.Replace.Version
					}
				}
			}
		}
	}
	if version != "" {
		b.Version = version
	}
	if commit != "" {
		b.Commit = commit
	}
	if b.Version == "" {
		b.Version = "(devel)"
	}
	return b
}

// details returns the details of the node's status: its build, flush mode
// and settings.
func (n *Node) details() *transport.StatusDetails {
	b := Build()
	return &transport.StatusDetails{
		Version:   b.Version,
		Commit:    b.Commit,
		Modified:  b.Modified,
		GoVersion: b.GoVersion,
		Platform:  b.Platform,
		Flush:     string(n.cfg.Flush),
		Settings:  slices.Clone(n.cfg.Settings),
	}
}
