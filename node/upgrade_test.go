package node

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/commitlog/vfs"
	"github.com/raftlog/raftlog/replica"
	"github.com/raftlog/raftlog/transport"
)

// extractTarGz unpacks a .tar.gz into dir.
func extractTarGz(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, filepath.Clean(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(out, tr); err != nil {
				t.Fatal(err)
			}
			if err := out.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// The data dir of a node of the version before named logs (made by that
// version's binary: 300 records appended, 3 more with a client id, a trim
// below 101 and its snapshot, 20 more; then a clean stop) starts with this
// version as the default log, every record where it was; named logs are
// then created beside it, and the catalog survives a snapshot of the
// default log and a restart.
func TestUpgradeFromBeforeNamedLogs(t *testing.T) {
	dir := t.TempDir()
	extractTarGz(t, filepath.Join("testdata", "datadir-before-named-logs.tar.gz"), dir)
	c := &testCluster{t: t, dir: dir, nodes: map[string]*Node{}, addrs: map[string][2]string{}}
	t.Cleanup(c.closeAll)
	c.start("n1", nil)
	c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := clusterClient(t, c, nil)

	want := map[uint64]string{}
	for i := uint64(101); i <= 303; i++ {
		want[i] = fmt.Sprintf("old-record-%d", i-3)
	}
	want[304], want[305], want[306] = "one", "two", "three"
	for i := uint64(308); i <= 327; i++ {
		want[i] = fmt.Sprintf("late-record-%d", i-307)
	}
	sameMap(t, "the old default log", readLog(t, ctx, cl.Log(transport.DefaultLog)), want)

	if _, err := cl.CreateLog(ctx, "after", client.CreateLogOptions{Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	after := appendLog(t, ctx, cl.Log("after"), "after", 10)
	for i, r := range appendLog(t, ctx, cl.Log(transport.DefaultLog), "new-default", 5) {
		want[i] = r
	}
	// A trim makes the default log take a snapshot, which now carries the
	// catalog.
	if _, err := cl.Trim(ctx, 200); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if i < 200 {
			delete(want, i)
		}
	}
	// The trim's snapshot holds the catalog (state version 3), so the
	// restart restores it from there, not from replayed entries.
	for deadline := time.Now().Add(30 * time.Second); ; {
		files, err := replica.ReadSnapFiles(vfs.Default, filepath.Join(dir, "n1", "snapshots"), logGroups)
		if err != nil {
			t.Fatal(err)
		}
		if len(files) > 0 && files[0].State[0] == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot with state version 3 after the trim: %d files", len(files))
		}
		waitApplied(t, c.nodes, 100*time.Millisecond)
	}
	c.stop("n1")
	c.start("n1", nil)
	cl2 := clusterClient(t, c, nil)
	sameMap(t, "the default log after the upgrade and a restart", readLog(t, ctx, cl2.Log(transport.DefaultLog)), want)
	sameMap(t, "log after, after a restart", readLog(t, ctx, cl2.Log("after")), after)
}
