package replica

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

// listControl is a Control that keeps the commands it applied.
type listControl struct{ applied []string }

func (c *listControl) ApplyControl(index uint64, data []byte) any {
	c.applied = append(c.applied, fmt.Sprintf("%d:%s", index, data))
	return len(c.applied)
}

func (c *listControl) ControlState() []byte {
	var b bytes.Buffer
	for _, a := range c.applied {
		b.WriteString(a + ";")
	}
	return b.Bytes()
}

func (c *listControl) RestoreControl(state []byte) error {
	c.applied = nil
	for _, a := range bytes.Split(state, []byte(";")) {
		if len(a) > 0 {
			c.applied = append(c.applied, string(a))
		}
	}
	return nil
}

// A control command reaches the log's Control with its index, is not a
// record, and its state travels in the log's snapshots.
func TestControlCommands(t *testing.T) {
	h := newHarness(t)
	c := &listControl{}
	h.f.SetControl(c)
	h.record("", 0, 0, 1, "r1")                                                        // 1
	if got := h.apply(raft.LogCommand, EncodeControlCmd([]byte("create"))); got != 1 { // 2
		t.Fatalf("control command answered %v, want 1", got)
	}
	h.record("", 0, 0, 1, "r2") // 3
	if fmt.Sprint(c.applied) != "[2:create]" {
		t.Fatalf("control applied %v", c.applied)
	}
	var l raft.Log
	if err := h.view.GetLog(2, &l); err != nil {
		t.Fatal(err)
	}
	if _, ok := RecordPayload(l.Data); ok {
		t.Fatal("a control command reads as a record")
	}
	state := h.f.State()
	if state[0] != 3 {
		t.Fatalf("state version %d with a control state, want 3", state[0])
	}
	c2 := &listControl{applied: []string{"stale"}}
	g := NewFSM(h.view, discardLogger())
	g.SetControl(c2)
	g.mu.Lock()
	err := g.decodeLocked(state)
	g.mu.Unlock()
	if err != nil || fmt.Sprint(c2.applied) != "[2:create]" {
		t.Fatalf("restored control %v, %v; want [2:create]", c2.applied, err)
	}
	if !bytes.Equal(g.State(), state) {
		t.Fatal("the restored state encodes otherwise")
	}
}

// A log whose control state is empty writes state version 2, which nodes
// older than control commands read; restoring it empties the control.
func TestControlEmptyKeepsVersion2(t *testing.T) {
	h := newHarness(t)
	c := &listControl{}
	h.f.SetControl(c)
	h.record("", 0, 0, 1, "r1")
	state := h.f.State()
	if state[0] != 2 {
		t.Fatalf("state version %d without a control state, want 2", state[0])
	}
	c.applied = []string{"left over"}
	h.f.mu.Lock()
	err := h.f.decodeLocked(state)
	h.f.mu.Unlock()
	if err != nil || len(c.applied) != 0 {
		t.Fatalf("restoring a version 2 state left the control %v (%v)", c.applied, err)
	}
}

// Without a Control, a control command is refused, not stored as a record,
// and a snapshot's control state passes through unchanged (a backup
// restored by a tool that does not know it keeps it).
func TestControlWithoutControl(t *testing.T) {
	h := newHarness(t)
	res := h.apply(raft.LogCommand, EncodeControlCmd([]byte("x")))
	if err, ok := res.(error); !ok || !errors.Is(err, errBadCommand) {
		t.Fatalf("control command on a log without control: %v, want errBadCommand", res)
	}
	src := newHarness(t)
	src.f.SetControl(&listControl{})
	src.apply(raft.LogCommand, EncodeControlCmd([]byte("keep")))
	state := src.f.State()
	restored, _, _, err := RestoredState(state, 1)
	if err != nil {
		t.Fatal(err)
	}
	c := &listControl{}
	g := NewFSM(src.view, discardLogger())
	g.SetControl(c)
	g.mu.Lock()
	err = g.decodeLocked(restored)
	g.mu.Unlock()
	if err != nil || fmt.Sprint(c.applied) != "[1:keep]" {
		t.Fatalf("control state after RestoredState: %v, %v", c.applied, err)
	}
}
