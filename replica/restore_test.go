package replica

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/transport"
)

// A restore raft refuses before it does anything comes back Unavailable,
// which the client retries; a leadership transfer under way is one such
// refusal (a new named log's leadership moves to its preferred leader:
// node TestNamedLogRestoreRefusals met it in CI as an Internal error).
func TestRestoreErrorRetryable(t *testing.T) {
	r := &Replica{}
	for _, err := range []error{raft.ErrLeadershipTransferInProgress, raft.ErrRaftShutdown, raft.ErrEnqueueTimeout} {
		if got := r.restoreError(fmt.Errorf("restore: %w", err)); transport.ErrorCode(got) != transport.CodeUnavailable {
			t.Errorf("raft.Restore failing with %v: %v (code %v), want Unavailable", err, got, transport.ErrorCode(got))
		}
	}
	if got := r.restoreError(errors.New("disk on fire")); transport.ErrorCode(got) == transport.CodeUnavailable {
		t.Errorf("a restore that failed otherwise: %v, want it not retried as Unavailable", got)
	}
}

// The mark of a restore is a named log's control state: set by its
// command, kept in the state (as version 3), and gone from a state a
// restore brings (RestoredLogState), which also forgets the members'
// client addresses and any other control state (a default log's
// catalog).
func TestRestoreMark(t *testing.T) {
	f := NewFSM(nil, hclog.NewNullLogger())
	m := &restoreMark{}
	f.SetControl(m)
	f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: EncodeMemberCmd("n1", "10.0.0.1:7000")})
	if res := f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: EncodeControlCmd([]byte("other"))}); res == nil || m.set.Load() {
		t.Fatalf("an unknown control command: %v, marked %v; want an error and no mark", res, m.set.Load())
	}
	if res := f.Apply(&raft.Log{Index: 3, Type: raft.LogCommand, Data: EncodeControlCmd([]byte(restoringState))}); res != nil || !m.set.Load() {
		t.Fatalf("the restore's mark: %v, marked %v", res, m.set.Load())
	}
	state := f.State()
	if state[0] != 3 {
		t.Fatalf("a marked state has version %d, want 3 (with its control state)", state[0])
	}
	f2 := NewFSM(nil, hclog.NewNullLogger())
	m2 := &restoreMark{}
	f2.SetControl(m2)
	f2.mu.Lock()
	err := f2.decodeLocked(state)
	f2.mu.Unlock()
	if err != nil || !m2.set.Load() {
		t.Fatalf("a marked state decoded: %v, marked %v", err, m2.set.Load())
	}

	out, _, _, err := RestoredLogState(state, 1)
	if err != nil {
		t.Fatal(err)
	}
	if out[0] != 2 {
		t.Fatalf("a restored state has version %d, want 2 (no control state)", out[0])
	}
	f2.mu.Lock()
	err = f2.decodeLocked(out)
	f2.mu.Unlock()
	if err != nil || m2.set.Load() || f2.Member("n1") != "" {
		t.Fatalf("the restored state decoded: %v, marked %v, member n1 at %q; want no mark and no address", err, m2.set.Load(), f2.Member("n1"))
	}
	if _, _, _, err := RestoredLogState(state, 7); err == nil {
		t.Fatal("a state restored with another floor than its own")
	}
	if _, _, _, err := RestoredLogState([]byte{9}, 1); !errors.Is(err, ErrStateVersion) {
		t.Fatalf("a state of version 9: %v, want ErrStateVersion", err)
	}
	if err := m2.RestoreControl([]byte("catalog bytes")); err == nil {
		t.Fatal("a control state that is no mark restored into a named log")
	}
}

// An append that checked the mark before a restore began, and whose
// records were not yet applied when BeginRestore found the log empty, was
// stored before the mark and acknowledged, and the restore then dropped
// it with everything below its snapshot. The hook appends right after
// BeginRestore's check: either the append is held back and then refused
// as the log is being restored, or (without the gate) it is acknowledged
// and BeginRestore marks a log that holds it.
func TestBeginRestoreWhileAppending(t *testing.T) {
	r := startSingle(t, func(c *Config) { c.Log, c.Name = 1, "orders" })
	t.Cleanup(func() { r.Shutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	type result struct {
		resp *transport.AppendResponse
		err  error
	}
	appended := make(chan result, 1)
	held := make(chan struct{}, 1)
	appendHeldForRestore = func() { held <- struct{}{} }
	beginRestoreChecked = func() {
		go func() {
			resp, err := r.Append(ctx, &transport.AppendRequest{Records: [][]byte{[]byte("late")}})
			appended <- result{resp, err}
		}()
		select {
		case <-held:
		case res := <-appended:
			appended <- res
		}
	}
	t.Cleanup(func() { beginRestoreChecked, appendHeldForRestore = nil, nil })

	if err := r.BeginRestore(ctx, 10*time.Second); err != nil {
		t.Fatalf("BeginRestore: %v", err)
	}
	res := <-appended
	if res.err == nil {
		t.Fatalf("an append during the start of a restore was acknowledged at %v, and the log is marked for the restore, which drops it", res.resp.Indexes)
	}
	if transport.ErrorCode(res.err) != transport.CodeFailedPrecondition || !r.Restoring() {
		t.Fatalf("an append during the start of a restore: %v (restoring: %v), want FailedPrecondition as the log is being restored", res.err, r.Restoring())
	}
}
