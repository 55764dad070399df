package commitlog

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/raftlog/raftlog/commitlog/faultfs"
)

// TestRecoveryInfoSaysWhatOpenDid opens a new log, reopens it after a clean
// Close, and after a crash that tore a record and left a half-prepared
// segment, and checks what Recovery reports each time.
func TestRecoveryInfoSaysWhatOpenDid(t *testing.T) {
	fs := faultfs.New(3)
	opts := crashOptions(fs, 8192, SyncFlush, WritePwrite)
	l, err := Open(crashTestDir, &opts)
	if err != nil {
		t.Fatal(err)
	}
	if info := l.Recovery(); !info.New || info.Crashed || info.Records != 0 {
		t.Fatalf("a new log: %+v", info)
	}
	var pos []int64
	for i := range 5 {
		p, err := l.Append(payloadFor(i, 100))
		if err != nil {
			t.Fatal(err)
		}
		pos = append(pos, p)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err = Open(crashTestDir, &opts); err != nil {
		t.Fatal(err)
	}
	info := l.Recovery()
	want := RecoveryInfo{Checkpoint: info.Checkpoint, ScannedFrom: l.End(), Synced: l.End(), End: l.End(), Stop: errNoMagic.Error()}
	if info.Checkpoint == 0 || !reflect.DeepEqual(info, want) {
		t.Fatalf("after a clean Close: %+v, want %+v with a checkpoint", info, want)
	}

	// Three records written but not synced, the first of them torn by the
	// crash, and a segment left half prepared.
	durable := l.End()
	opts.Flush = AsyncFlushUnsafe
	l.Close()
	if l, err = Open(crashTestDir, &opts); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		p, err := l.Append(payloadFor(10+i, 100))
		if err != nil {
			t.Fatal(err)
		}
		pos = append(pos, p)
	}
	crashSettle(l)
	nfs := fs.CrashKeepAll()
	l.Close()
	fs, opts.FS = nfs, nfs
	crashFlipByte(t, fs, crashSegmentPath(0), pos[5]+HeaderSize+10)
	tmp := crashSegmentPath(1<<20) + tmpSuffix
	f, err := fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if l, err = Open(crashTestDir, &opts); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	info = l.Recovery()
	if !info.Crashed || info.ScannedFrom != durable || info.End != pos[5] || info.Records != 0 ||
		!strings.Contains(info.Stop, "checksum") || !info.Torn || !reflect.DeepEqual(info.Removed, []string{tmp}) {
		t.Fatalf("after a crash that tore the record at %d (durable up to %d): %+v", pos[5], durable, info)
	}
}
