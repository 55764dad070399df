package replica

import (
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// recordingApplier stands in for raft: it records the commands proposed,
// in order, and returns futures that are already done.
type recordingApplier struct {
	mu   sync.Mutex
	cmds []string
}

func (a *recordingApplier) Apply(cmd []byte, _ time.Duration) raft.ApplyFuture {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cmds = append(a.cmds, string(cmd))
	return doneFuture{}
}

func (a *recordingApplier) proposed() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.cmds)
}

type doneFuture struct{}

func (doneFuture) Error() error          { return nil }
func (doneFuture) Index() uint64         { return 0 }
func (doneFuture) Response() interface{} { return nil }

func cmds(s ...string) [][]byte {
	out := make([][]byte, len(s))
	for i, c := range s {
		out[i] = []byte(c)
	}
	return out
}

// waitPending waits until n proposals wait in p.
func waitPending(t *testing.T, p *Proposer, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		got := len(p.pending)
		p.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d proposals pending, want %d", got, n)
		}
		runtime.Gosched()
	}
}

// recv waits for the proposal on ch.
func recv(t *testing.T, ch <-chan *Proposal) *Proposal {
	t.Helper()
	select {
	case pr := <-ch:
		return pr
	case <-time.After(10 * time.Second):
		t.Fatal("the proposal was not proposed")
		return nil
	}
}

// proposeAsync proposes in a goroutine and returns a channel that yields
// the proposal once it is proposed.
func proposeAsync(p *Proposer, c ...string) <-chan *Proposal {
	ch := make(chan *Proposal, 1)
	go func() { ch <- p.Propose(cmds(c...)) }()
	return ch
}

func TestProposerProposesAtOnceWhenIdle(t *testing.T) {
	a := &recordingApplier{}
	p := NewProposer(a, time.Hour, 256, 1, nil)
	pr := p.Propose(cmds("a", "b"))
	if got := a.proposed(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("proposed %q, want [a b]", got)
	}
	if len(pr.Futures) != 2 {
		t.Fatalf("%d futures, want 2", len(pr.Futures))
	}
	p.Finish(pr)
	// Idle again: the next one goes at once too.
	p.Finish(p.Propose(cmds("c")))
	if got := a.proposed(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("proposed %q, want [a b c]", got)
	}
}

func TestProposerBatchesWhileOneIsInFlight(t *testing.T) {
	a := &recordingApplier{}
	p := NewProposer(a, time.Hour, 256, 1, nil)
	first := p.Propose(cmds("1"))
	second := proposeAsync(p, "2a", "2b")
	waitPending(t, p, 1)
	third := proposeAsync(p, "3")
	waitPending(t, p, 2)
	if got := a.proposed(); !slices.Equal(got, []string{"1"}) {
		t.Fatalf("proposed %q while a batch was in flight, want only [1]", got)
	}
	p.Finish(first)
	pr2, pr3 := recv(t, second), recv(t, third)
	if got := a.proposed(); !slices.Equal(got, []string{"1", "2a", "2b", "3"}) {
		t.Fatalf("proposed %q, want [1 2a 2b 3]", got)
	}
	if pr2.batch != pr3.batch {
		t.Fatal("the waiting proposals went in different batches")
	}
	// The batch is in flight until both of its proposals finish.
	p.Finish(pr2)
	fourth := proposeAsync(p, "4")
	waitPending(t, p, 1)
	p.Finish(pr3)
	p.Finish(recv(t, fourth))
	if got := a.proposed(); !slices.Equal(got, []string{"1", "2a", "2b", "3", "4"}) {
		t.Fatalf("proposed %q, want [1 2a 2b 3 4]", got)
	}
}

func TestProposerLingerBoundsTheWait(t *testing.T) {
	a := &recordingApplier{}
	p := NewProposer(a, time.Millisecond, 256, 1, nil)
	first := p.Propose(cmds("1"))
	// first never finishes: the second goes once it has lingered.
	start := time.Now()
	second := p.Propose(cmds("2"))
	if waited := time.Since(start); waited < time.Millisecond {
		t.Fatalf("proposed after %v, before the linger of 1ms", waited)
	}
	if got := a.proposed(); !slices.Equal(got, []string{"1", "2"}) {
		t.Fatalf("proposed %q, want [1 2]", got)
	}
	if first.batch == second.batch {
		t.Fatal("a lingered proposal joined the batch in flight")
	}
}

func TestProposerMaxBatchProposesAtOnce(t *testing.T) {
	a := &recordingApplier{}
	p := NewProposer(a, time.Hour, 3, 1, nil)
	p.Propose(cmds("1")) // in flight, never finished
	second := proposeAsync(p, "2")
	waitPending(t, p, 1)
	// Two more commands make three waiting: the batch goes without
	// waiting for the first to finish.
	third := p.Propose(cmds("3a", "3b"))
	if pr2 := recv(t, second); pr2.batch != third.batch {
		t.Fatal("a full batch was split")
	}
	if got := a.proposed(); !slices.Equal(got, []string{"1", "2", "3a", "3b"}) {
		t.Fatalf("proposed %q, want [1 2 3a 3b]", got)
	}
}

func TestProposerWithoutLingerNeverWaits(t *testing.T) {
	a := &recordingApplier{}
	p := NewProposer(a, -1, 256, 1, nil)
	p.Propose(cmds("1")) // in flight, never finished
	p.Propose(cmds("2"))
	if got := a.proposed(); !slices.Equal(got, []string{"1", "2"}) {
		t.Fatalf("proposed %q, want [1 2]", got)
	}
}

// TestProposerOverlapsOnceTheLeaderStored: once the leader has stored the
// batch in flight, what waits goes while that batch replicates, up to
// maxInFlight batches; with a maxInFlight of one it waits for the commit.
func TestProposerOverlapsOnceTheLeaderStored(t *testing.T) {
	a := &recordingApplier{}
	p := NewProposer(a, time.Hour, 256, 2, nil)
	first := p.Propose(cmds("1"))
	second := proposeAsync(p, "2")
	waitPending(t, p, 1)
	p.Stored() // the leader stored batch 1; it replicates
	pr2 := recv(t, second)
	if pr2.batch == first.batch {
		t.Fatal("the second proposal joined the first batch")
	}
	// Two batches in flight, the most: a store ending lets nothing go.
	third := proposeAsync(p, "3")
	waitPending(t, p, 1)
	p.Stored()
	waitPending(t, p, 1)
	if got := a.proposed(); !slices.Equal(got, []string{"1", "2"}) {
		t.Fatalf("proposed %q with two batches in flight, want [1 2]", got)
	}
	// Batch 1 commits; batch 2 is stored (the leader's store is idle):
	// the third goes while batch 2 replicates.
	p.Finish(first)
	pr3 := recv(t, third)
	// Batch 3 is being stored: a batch that commits meanwhile lets the
	// next wait for the store, so that it goes with what else arrives.
	fourth := proposeAsync(p, "4")
	waitPending(t, p, 1)
	p.Finish(pr2)
	waitPending(t, p, 1)
	p.Stored()
	recv(t, fourth)
	p.Finish(pr3)
	if got := a.proposed(); !slices.Equal(got, []string{"1", "2", "3", "4"}) {
		t.Fatalf("proposed %q, want [1 2 3 4]", got)
	}

	one := NewProposer(&recordingApplier{}, time.Hour, 256, 1, nil)
	one.Propose(cmds("1"))
	proposeAsync(one, "2")
	waitPending(t, one, 1)
	one.Stored()
	waitPending(t, one, 1) // still waiting: one batch at a time
}
