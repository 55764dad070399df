//go:build linux

package raftstore

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mgfFootprint is what a DB's directory takes: bytes allocated on disk
// (st_blocks) by part, and the bytes an open DB maps (segments and index
// files are mapped whole).
type mgfFootprint struct {
	diskLog, diskIndex, diskOther int64
	mapped                        int64
	stable                        int64 // length of the newer stable file
	indexFiles, dirs              int
}

func mgfMeasure(b *testing.B, dir string) mgfFootprint {
	b.Helper()
	var f mgfFootprint
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		disk := st.Blocks * 512
		switch {
		case d.IsDir():
			f.dirs++
			f.diskOther += disk
		case strings.HasPrefix(rel, logDirName+"/") && isLogOrIndex(path):
			f.diskLog += disk
			f.mapped += st.Size
		case strings.HasPrefix(rel, indexDirName+"/"):
			f.diskIndex += disk
			f.mapped += st.Size
			f.indexFiles++
		default:
			f.diskOther += disk
			if strings.HasPrefix(rel, "stable.") {
				f.stable = max(f.stable, st.Size)
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return f
}

// BenchmarkManyGroups measures what many small groups cost a DB: a DB of
// n groups, as a node with n/3 named logs holds them, where a third are
// empty and the rest tiny (5 entries of 200 bytes, as a raft group that
// was bootstrapped and took a few appends), each with raft's three stable
// keys. It reports the bytes on disk and mapped per group (beyond those of
// an empty DB) and the time to open the DB closed cleanly (ns/op), and
// after that to look every group up (open+stores).
func BenchmarkManyGroups(b *testing.B) {
	var base mgfFootprint
	for _, n := range []int{0, 100, 300} {
		b.Run(fmt.Sprintf("groups=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			db, err := OpenDB(dir, nil)
			if err != nil {
				b.Fatal(err)
			}
			for g := 1; g <= n; g++ {
				s, err := db.Store(uint64(g))
				if err != nil {
					b.Fatal(err)
				}
				for _, k := range []string{"CurrentTerm", "LastVoteTerm"} {
					if err := s.SetUint64([]byte(k), 1); err != nil {
						b.Fatal(err)
					}
				}
				if err := s.Set([]byte("LastVoteCand"), []byte("node-1")); err != nil {
					b.Fatal(err)
				}
				if g%3 != 0 {
					if err := s.StoreLogs(ctEntries(1, 5, 1, 200)); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := db.Close(); err != nil {
				b.Fatal(err)
			}
			fp := mgfMeasure(b, dir)
			if n == 0 {
				base = fp
			}
			var lookups time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				db, err := OpenDB(dir, nil)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				start := time.Now()
				for g := 1; g <= n; g++ {
					if _, err := db.Store(uint64(g)); err != nil {
						b.Fatal(err)
					}
				}
				lookups += time.Since(start)
				if err := db.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(fp.diskIndex+fp.diskOther)/1024, "index+stable+dirs-KiB")
			b.ReportMetric(float64(fp.diskLog)/1024, "log-KiB")
			b.ReportMetric(float64(fp.mapped)/1024, "mapped-KiB")
			b.ReportMetric(float64(fp.indexFiles), "index-files")
			b.ReportMetric(float64(fp.stable), "stable-file-bytes")
			if n > 0 {
				per := func(a, z int64) float64 { return float64(a-z) / float64(n) / 1024 }
				b.ReportMetric(per(fp.diskIndex+fp.diskOther, base.diskIndex+base.diskOther), "disk-KiB/group")
				b.ReportMetric(per(fp.mapped, base.mapped), "mapped-KiB/group")
			}
			b.ReportMetric(float64(lookups.Nanoseconds())/float64(b.N), "ns-stores/op")
		})
	}
}
