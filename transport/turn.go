package transport

import (
	"context"
	"sync"
)

// Turn is an append request's place among the append requests of its
// connection. Serve hands requests to handlers concurrently, so a handler
// that must act on a connection's appends in the order they arrived (the
// node proposes them to raft in that order, see AppendRequest.After) waits
// for its turn, acts, and passes it: the next append of the connection
// waits until this one has passed.
//
// Serve passes a request's turn when its handler returns, so a handler
// that returns early, or forgets, holds no one up for longer than it runs.
// A Turn is safe for concurrent use; its methods do nothing on a nil Turn.
type Turn struct {
	prev <-chan struct{} // closed once the append before passed; nil for none
	done chan struct{}   // closed by Pass
	once sync.Once
}

type turnKey struct{}

// TurnOf returns the turn of the append request whose handler was given
// ctx, or nil for other requests and contexts.
func TurnOf(ctx context.Context) *Turn {
	t, _ := ctx.Value(turnKey{}).(*Turn)
	return t
}

// Wait waits until every append request that arrived on the connection
// before this one has passed its turn, or ctx ends (its error).
func (t *Turn) Wait(ctx context.Context) error {
	if t == nil || t.prev == nil {
		return nil
	}
	select {
	case <-t.prev:
		return nil
	default:
	}
	select {
	case <-t.prev:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Pass ends the turn: the next append request of the connection may go.
// Passing again does nothing.
func (t *Turn) Pass() {
	if t != nil {
		t.once.Do(func() { close(t.done) })
	}
}

// nextTurn returns the turn of a new append request after the one whose
// turn ends with prev (nil for none).
func nextTurn(prev <-chan struct{}) *Turn {
	return &Turn{prev: prev, done: make(chan struct{})}
}
