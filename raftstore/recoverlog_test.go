package raftstore

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/commitlog"
	"github.com/raftlog/raftlog/commitlog/faultfs"
)

// TestRecoveryIsLogged crashes a store in the middle of a batch whose last
// entry the crash tore, and checks that reopening it says, through
// Options.Logger, what recovery did: a store created, a tail scanned after
// an unclean shutdown, the torn record cut off, the records replayed, the
// incomplete batch removed and the index rebuilt; and after a clean Close,
// only that the store was opened.
func TestRecoveryIsLogged(t *testing.T) {
	var buf bytes.Buffer
	fs := faultfs.New(1)
	opts := crOptions(fs, AsyncFlush)
	opts.Logger = hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info})
	s, err := Open(crDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	batch := func(lo, hi uint64) []*raft.Log {
		var logs []*raft.Log
		for i := lo; i <= hi; i++ {
			logs = append(logs, ctEntry(i, 1, 100))
		}
		return logs
	}
	if err := s.StoreLogs(batch(1, 10)); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs(batch(11, 20)); err != nil {
		t.Fatal(err)
	}
	pos := s.files.Load().find(20).load(20)
	nfs := fs.CrashKeepAll()
	s.Close()
	torn := filepath.Join(crDir, logDirName, fmt.Sprintf("%020d", 0))
	f, err := nfs.OpenFile(torn, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := []byte{0}
	f.ReadAt(b, pos+commitlog.HeaderSize+5)
	b[0] ^= 0xff
	f.WriteAt(b, pos+commitlog.HeaderSize+5)
	f.Sync()
	f.Close()

	if !strings.Contains(buf.String(), "created a new store") {
		t.Fatalf("creating the store logged:\n%s", buf.String())
	}
	buf.Reset()
	opts.FS = nfs
	if s, err = Open(crDir, opts); err != nil {
		t.Fatal(err)
	}
	if last, _ := s.LastIndex(); last != 10 {
		t.Fatalf("last index %d after the crash, want 10: the batch 11..20 was torn", last)
	}
	got := buf.String()
	for _, want := range []string{
		"[INFO]  opened a store that was not closed cleanly: scanned the commit log from the checkpoint: dir=/db",
		fmt.Sprintf("[INFO]  cut off a record torn by the crash, and everything after it: dir=/db position=%d reason=\"checksum mismatch\"", pos),
		"[INFO]  replayed the commit log past the checkpoint into the indexes: dir=/db from=0 records=19 groups=1",
		"[INFO]  removed a batch the crash cut short: dir=/db group=0",
		"entries=9 indexes=11..19",
		"[INFO]  rebuilt the index of a group from the commit log: dir=/db group=0 slots=10 first=1 last=10 commit=0",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("recovery after the crash did not log %q; it logged:\n%s", want, got)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if s, err = Open(crDir, opts); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := buf.String(); !strings.Contains(got, "opened a store closed cleanly") || strings.Count(got, "\n") != 1 {
		t.Errorf("a clean open logged:\n%s", got)
	}
}

// TestNoLoggerLogsNothing checks the default logger: a null logger, so
// that a library logs nothing unless asked.
func TestNoLoggerLogsNothing(t *testing.T) {
	o, err := (*Options)(nil).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.Logger == nil || o.Logger.IsError() {
		t.Fatalf("default logger %#v logs", o.Logger)
	}
}
