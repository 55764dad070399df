package catalog

import (
	"math/rand/v2"
	"sync"
	"testing"
)

// TestWatch: the channel Watch returns is closed by the next apply, and
// not before.
func TestWatch(t *testing.T) {
	a := started(t, 3)
	s, changed := a.f.Watch()
	if s != a.f.State() {
		t.Fatal("Watch returns another state than State")
	}
	select {
	case <-changed:
		t.Fatal("changed before any apply")
	default:
	}
	a.try(&MarkLeaving{ID: "n9"}) // refused: the applied index still moves
	select {
	case <-changed:
	default:
		t.Fatal("not changed after an apply")
	}
	if s2, _ := a.f.Watch(); s2.Index() != s.Index()+1 {
		t.Fatalf("index %d after %d", s2.Index(), s.Index())
	}
}

// TestStateImmutable: a State read before commands apply stays as it was,
// and what its accessors return is the caller's to modify.
func TestStateImmutable(t *testing.T) {
	a := base(t)
	s := a.f.State()
	before := string(AppendSnapshot(nil, s))
	l, _ := s.Log("a")
	l.Members[0] = "n9"
	ls := s.LogsOf("n1")
	ls[0].Members[0] = "n9"
	for _, c := range randomCommands(rand.New(rand.NewPCG(4, 4)), 200) {
		a.try(c)
	}
	a.ok(&DeleteLog{ID: idA})
	if string(AppendSnapshot(nil, s)) != before {
		t.Fatal("a published State changed")
	}
}

// TestConcurrentReaders: readers on other goroutines read consistent
// catalogs while commands apply (run with -race).
func TestConcurrentReaders(t *testing.T) {
	cmds := randomCommands(rand.New(rand.NewPCG(5, 5)), 1500)
	a := newApplier(t)
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last uint64
			for {
				s, changed := a.f.Watch()
				if s.Index() < last {
					errs <- "the applied index went back"
					return
				}
				last = s.Index()
				for _, l := range s.Logs() {
					if l.ID != DefaultID && len(l.Members) != l.Settings.Replicas {
						errs <- "a log with other than its replica count of members"
						return
					}
					if byName, ok := s.Log(l.Name); !ok || byName.ID != l.ID {
						errs <- "a log not found by its name"
						return
					}
					for _, h := range l.Hosts() {
						_ = s.LogsOf(h)
					}
				}
				_ = s.Nodes()
				Plan(s, nil)
				select {
				case <-changed:
				case <-done:
					return
				}
			}
		}()
	}
	for _, c := range cmds {
		a.try(c)
	}
	close(done)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}
