package transport

// Pipelined AppendEntries: a connection of its own per pipeline, up to
// MaxInFlight requests on it at once, responses matched in order.
//
// How raft (v1.8.0, replication.go) drives a pipeline: one goroutine sends
// (pipelineSend), another consumes the futures (pipelineDecode). The
// consumer stops for good at the first future whose response failed
// (Success false, or a newer term; a failed connection reads as a zero
// response, so Success false too), and the sender learns it only when a
// send returns an error or it next looks at its channels; only then does
// raft Close the pipeline. hashicorp/raft's own pipeline can deadlock
// there: its sender blocks on a full in-flight queue whose reader blocks
// handing the next future to a consumer that is gone
// (grafana/pyroscope#5518). This pipeline does not: the decoder marks the
// pipeline failed before it hands over a failed future, and a failed
// pipeline's sends return at once, blocked ones included. So every
// blocking step waits on something that is bound to happen: the window
// frees when the decoder hands a future over, which raft's consumer takes
// while it runs; it stops only after a failed future, which has already
// failed the sends; and Close releases everything.

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// raftPipeline is a raft.AppendPipeline over one connection.
type raftPipeline struct {
	t *RaftTransport
	c *raftClientConn

	// window holds a token per request sent and not yet handed to done:
	// at most MaxInFlight.
	window chan struct{}
	// sent queues the futures of sent requests, in order, for the
	// decoder; its capacity, MaxInFlight, is never reached.
	sent chan *raftFuture
	// done is Consumer's channel: futures with their response.
	done chan raft.AppendFuture

	sendMu sync.Mutex // serialises sends: the frame order is the order in sent

	failOnce sync.Once
	failed   chan struct{} // closed when the pipeline takes no more sends
	failErr  error         // why; written before failed is closed

	closeOnce   sync.Once
	closed      chan struct{} // closed by Close
	decoderDone chan struct{} // closed when the decoder returns
}

func newRaftPipeline(t *RaftTransport, c *raftClientConn) (*raftPipeline, error) {
	n := t.cfg.MaxInFlight
	p := &raftPipeline{
		t: t, c: c,
		window:      make(chan struct{}, n),
		sent:        make(chan *raftFuture, n),
		done:        make(chan raft.AppendFuture, n),
		failed:      make(chan struct{}),
		closed:      make(chan struct{}),
		decoderDone: make(chan struct{}),
	}
	if !t.mux.track(p, true) {
		t.discard(c)
		return nil, raft.ErrTransportShutdown
	}
	go p.decode()
	return p, nil
}

// fail stops the pipeline taking sends, for reason err, and closes its
// connection so that a send or read in progress returns.
func (p *raftPipeline) fail(err error) {
	p.failOnce.Do(func() {
		p.failErr = err
		close(p.failed)
		p.c.Close()
	})
}

// AppendEntries implements raft.AppendPipeline. It blocks while
// MaxInFlight requests are in flight, and returns an error at once once
// the pipeline failed or was closed. Like RaftTransport.AppendEntries, it
// may cut args.Entries to the leading entries that fit a frame.
func (p *raftPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	select {
	case <-p.failed:
		return nil, p.failErr
	default:
	}
	select {
	case p.window <- struct{}{}:
	case <-p.failed:
		return nil, p.failErr
	}
	f := &raftFuture{start: time.Now(), args: args, resp: resp, ready: make(chan struct{})}
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	select {
	case <-p.failed:
		<-p.window
		return nil, p.failErr
	default:
	}
	if p.t.cfg.Timeout > 0 {
		p.c.conn.SetWriteDeadline(time.Now().Add(p.t.cfg.Timeout))
	}
	if err := p.t.send(p.c, raftAppendEntries, args); err != nil {
		<-p.window
		p.fail(raft.ErrPipelineShutdown)
		return nil, err
	}
	p.sent <- f
	return f, nil
}

// decode reads the responses in order and hands each future to Consumer.
// It returns after the first failed response, a failed connection, or
// Close.
func (p *raftPipeline) decode() {
	defer p.t.mux.wg.Done()
	defer close(p.decoderDone)
	defer p.failSent()
	for {
		var f *raftFuture
		select {
		case f = <-p.sent:
		case <-p.failed:
			return
		}
		if p.t.cfg.Timeout > 0 {
			p.c.conn.SetReadDeadline(time.Now().Add(p.t.cfg.Timeout))
		}
		rpcErr, err := p.t.receive(p.c, raftAppendEntries, f.resp)
		if err == nil {
			err = rpcErr
		}
		if err != nil || !f.resp.Success || f.resp.Term > f.args.Term {
			// raft stops consuming at this future: stop taking sends
			// before handing it over.
			p.fail(raft.ErrPipelineShutdown)
		}
		f.respond(err)
		select {
		case p.done <- f:
		case <-p.closed:
			return
		}
		<-p.window
		select {
		case <-p.failed:
			return
		default:
		}
	}
}

// failSent fails the futures of requests sent and not answered.
func (p *raftPipeline) failSent() {
	for {
		select {
		case f := <-p.sent:
			f.respond(raft.ErrPipelineShutdown)
		default:
			return
		}
	}
}

// Consumer implements raft.AppendPipeline.
func (p *raftPipeline) Consumer() <-chan raft.AppendFuture { return p.done }

// Close implements raft.AppendPipeline: it fails every request in flight,
// closes the connection and waits for the decoder.
func (p *raftPipeline) Close() error {
	p.closeOnce.Do(func() {
		close(p.closed)
		p.fail(raft.ErrPipelineShutdown)
		<-p.decoderDone
		// A send that began before the failure may have queued its
		// future after the decoder returned; sends that begin later see
		// the failure under sendMu.
		p.sendMu.Lock()
		p.failSent()
		p.sendMu.Unlock()
		p.t.discard(p.c)
		p.t.mux.untrack(p)
	})
	return nil
}

// raftFuture is a raft.AppendFuture.
type raftFuture struct {
	start time.Time
	args  *raft.AppendEntriesRequest
	resp  *raft.AppendEntriesResponse
	err   error         // written before ready is closed
	ready chan struct{} // closed by respond
}

func (f *raftFuture) respond(err error) {
	f.err = err
	close(f.ready)
}

// Error implements raft.Future: it waits for the response.
func (f *raftFuture) Error() error {
	<-f.ready
	return f.err
}

// Start implements raft.AppendFuture.
func (f *raftFuture) Start() time.Time { return f.start }

// Request implements raft.AppendFuture.
func (f *raftFuture) Request() *raft.AppendEntriesRequest { return f.args }

// Response implements raft.AppendFuture.
func (f *raftFuture) Response() *raft.AppendEntriesResponse { return f.resp }
