package main

import (
	"math"
	"os"
	"strings"
	"testing"
)

func TestMeasureFloor(t *testing.T) {
	dir := t.TempDir()
	f, err := measureFloor(dir, 20)
	if err != nil {
		t.Fatal(err)
	}
	// A real fdatasync and a real round trip take time; neither is a
	// minute.
	for name, v := range map[string]float64{"fdatasync": f.FsyncP50, "round trip": f.RTTP50} {
		if !(v > 0 && v < 60) {
			t.Errorf("%s p50 = %v s", name, v)
		}
	}
	if got, want := f.syncAppend(), 2*f.FsyncP50+2*f.RTTP50; math.Abs(got-want) > 1e-12 {
		t.Errorf("syncAppend = %v, want two of each: %v", got, want)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("measureFloor left %d files in its directory", len(left))
	}
	if _, err := measureFloor(dir+"/missing", 1); err == nil || !strings.Contains(err.Error(), "fdatasync floor") {
		t.Errorf("measureFloor in a missing directory: %v, want an error naming the fdatasync floor", err)
	}
}

func TestPrintFloor(t *testing.T) {
	sync, _ := selectSystems(sysRaftlogSync)
	r := &clusterReport{cfg: &clusterConfig{systems: sync}, res: newResults()}
	var b strings.Builder
	r.printFloor(&b)
	if b.Len() != 0 {
		t.Fatalf("a run without floors printed %q", b.String())
	}
	r.floors = []floor{{FsyncP50: 300e-6, RTTP50: 50e-6}, {FsyncP50: 200e-6, RTTP50: 40e-6}, {FsyncP50: 500e-6, RTTP50: 60e-6}}
	r.res.add(rowKey{floorWorkload, "", sysRaftlogSync}, measurement{mLatP50: 1.2e-3})
	r.printFloor(&b)
	// Medians of each: 300 µs, 50 µs, and of the sums (0.48, 0.70 and
	// 1.12 ms) 0.70 ms.
	for _, want := range []string{"medians of 3", "p50 300 µs", "p50 50.0 µs", ": 700 µs", "p50 of 1.20 ms"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("floor line lacks %q:\n%s", want, b.String())
		}
	}
}
