package client

import (
	"context"

	"github.com/raftlog/raftlog/transport"
)

// member is the connection to one member's client address. Every
// goroutine talking to the member shares it: a transport.Conn pipelines.
type member struct {
	ready chan struct{}   // closed once the dial has finished
	conn  *transport.Conn // set before ready is closed; nil if the dial failed
	err   error           // why the dial failed; set before ready is closed
}

// usable reports whether m holds a working connection or a dial still in
// progress, rather than a failure.
func (m *member) usable() bool {
	select {
	case <-m.ready:
		return m.conn != nil && m.conn.Err() == nil
	default:
		return true
	}
}

// dialError marks a failure to connect to a member: nothing was sent.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// conn returns the connection to addr, dialling one if there is none or
// the last one failed. Concurrent callers share one dial, which runs in its
// own goroutine under RequestTimeout so that a caller giving up does not
// fail it for the others. It returns ErrClosed after Close and a
// *dialError for every other failure, ctx's end included.
func (c *Client) conn(ctx context.Context, addr string) (*transport.Conn, error) {
	c.mu.Lock()
	if c.conns == nil {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	m := c.conns[addr]
	if m == nil || !m.usable() {
		m = &member{ready: make(chan struct{})}
		c.conns[addr] = m
		c.wg.Add(1)
		go c.dial(addr, m)
	}
	c.mu.Unlock()
	select {
	case <-m.ready:
	case <-ctx.Done():
		return nil, &dialError{ctx.Err()}
	case <-c.done:
		return nil, ErrClosed
	}
	if m.err != nil {
		return nil, &dialError{m.err}
	}
	return m.conn, nil
}

// dial connects m to addr and publishes the outcome. A connection made
// after Close is closed at once.
func (c *Client) dial(addr string, m *member) {
	defer c.wg.Done()
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.RequestTimeout)
	defer cancel()
	var conn *transport.Conn
	nc, err := c.opts.Dial(ctx, addr)
	if err == nil {
		conn, err = transport.NewConn(nc, &c.opts.Conn)
	}
	c.mu.Lock()
	closed := c.conns == nil
	switch {
	case err == nil && closed:
		m.err = ErrClosed
	case err == nil:
		m.conn = conn
	default:
		m.err = err
		if !closed && c.conns[addr] == m {
			delete(c.conns, addr)
		}
	}
	close(m.ready)
	c.mu.Unlock()
	if err == nil && closed {
		conn.Close()
	}
}

// closeConns closes the connections of members, which Close took from
// c.conns; a dial still in progress closes its own once it sees c.conns
// nil.
func closeConns(members map[string]*member) {
	for _, m := range members {
		select {
		case <-m.ready:
			if m.conn != nil {
				m.conn.Close()
			}
		default: // the dial closes its connection when it sees c.conns nil
		}
	}
}
