// Package testwait bounds calls made by tests: a call that spins, blocks
// or panics fails the test instead of hanging it or taking the test binary
// down. It is for tests only.
//
// Concurrency: Within may be called from several tests at once; it must
// be called from the test's own goroutine (it may call t.Fatalf).
package testwait

import (
	"testing"
	"time"
)

// Within runs f on its own goroutine and fails the test if f panics or
// does not return within d. name says what f does, for the failure.
func Within(t testing.TB, name string, d time.Duration, f func()) {
	t.Helper()
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		f()
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case p := <-done:
		if p != nil {
			t.Fatalf("%s panicked: %v", name, p)
		}
	case <-timer.C:
		t.Fatalf("%s did not return within %v", name, d)
	}
}
