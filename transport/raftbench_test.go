package transport

import (
	"bufio"
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// The benchmarks compare RaftTransport's codec and round trips with
// hashicorp/raft's NetworkTransport, which encodes every message, entries
// included, with go-msgpack's reflection. The msgpack cases encode and
// decode the way net_transport.go does: one Encoder and Decoder per
// connection, reused, over buffered streams, with TimeNotBuiltin set.

var benchSizes = []int{64, 256}

// BenchmarkRaftEncodeAppendEntries encodes an AppendEntries of n entries
// of 1 KiB.
func BenchmarkRaftEncodeAppendEntries(b *testing.B) {
	for _, n := range benchSizes {
		req := benchAppendRequest(n, 1024)
		b.Run(fmt.Sprintf("native/%d", n), func(b *testing.B) {
			bp := getRaftBuf()
			b.ReportAllocs()
			b.SetBytes(int64(n * 1024))
			for b.Loop() {
				buf := appendRaftHeader((*bp)[:0], raftAppendEntries, 0)
				buf, err := appendAppendEntriesRequest(buf, req, len(req.Entries))
				if err != nil {
					b.Fatal(err)
				}
				*bp = buf
			}
		})
		b.Run(fmt.Sprintf("msgpack/%d", n), func(b *testing.B) {
			var out bytes.Buffer
			w := bufio.NewWriterSize(&out, 256<<10)
			enc := codec.NewEncoder(w, msgpackHandle())
			b.ReportAllocs()
			b.SetBytes(int64(n * 1024))
			for b.Loop() {
				out.Reset()
				w.WriteByte(0)
				if err := enc.Encode(req); err != nil {
					b.Fatal(err)
				}
				w.Flush()
			}
		})
	}
}

// BenchmarkRaftDecodeAppendEntries decodes an AppendEntries of n entries
// of 1 KiB, into a new request each time as a follower does.
func BenchmarkRaftDecodeAppendEntries(b *testing.B) {
	for _, n := range benchSizes {
		req := benchAppendRequest(n, 1024)
		b.Run(fmt.Sprintf("native/%d", n), func(b *testing.B) {
			body, err := appendAppendEntriesRequest(nil, req, len(req.Entries))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(n * 1024))
			for b.Loop() {
				// The frame reader's allocation of the body is part of
				// the cost.
				frame := make([]byte, len(body))
				copy(frame, body)
				if _, err := decodeRequest(raftAppendEntries, frame); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("msgpack/%d", n), func(b *testing.B) {
			var buf []byte
			if err := codec.NewEncoderBytes(&buf, msgpackHandle()).Encode(req); err != nil {
				b.Fatal(err)
			}
			r := bytes.NewReader(buf)
			br := bufio.NewReaderSize(r, 256<<10)
			dec := codec.NewDecoder(br, &codec.MsgpackHandle{})
			b.ReportAllocs()
			b.SetBytes(int64(n * 1024))
			for b.Loop() {
				r.Reset(buf)
				br.Reset(r)
				var got raft.AppendEntriesRequest
				if err := dec.Decode(&got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRaftRoundTrip sends AppendEntries of 64 entries of 1 KiB to a
// follower on loopback that answers at once: one at a time (sync), and
// through a pipeline of 4; sync16k sends 64 entries of 16 KiB one at a
// time. Its rt/s metric is round trips per second.
func BenchmarkRaftRoundTrip(b *testing.B) {
	req := benchAppendRequest(64, 1024)
	large := benchAppendRequest(64, 16<<10)
	answer := func(rpc raft.RPC) (any, error) {
		return &raft.AppendEntriesResponse{Term: 3, LastLog: 2_000_000, Success: true}, nil
	}
	for _, kind := range []string{"native", "hashicorp"} {
		newTransport := func(b *testing.B, inFlight int) raft.Transport {
			ln := listenLoopback(b)
			if kind == "hashicorp" {
				tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
					Stream: tcpLayer{ln}, MaxPool: 4, MaxRPCsInFlight: inFlight, Timeout: 10 * time.Second,
					Logger: hclog.NewNullLogger(),
				})
				b.Cleanup(func() { tr.Close() })
				return tr
			}
			return newTestTransportOn(b, ln, &RaftTransportConfig{MaxInFlight: inFlight, Logger: hclog.NewNullLogger()})
		}
		serve := func(b *testing.B, tr raft.Transport) {
			done := make(chan struct{})
			go func() {
				for {
					select {
					case rpc := <-tr.Consumer():
						resp, err := answer(rpc)
						rpc.Respond(resp, err)
					case <-done:
						return
					}
				}
			}()
			b.Cleanup(func() { close(done) })
		}
		for _, c := range []struct {
			name string
			req  *raft.AppendEntriesRequest
		}{{"sync", req}, {"sync16k", large}} {
			b.Run(kind+"/"+c.name, func(b *testing.B) {
				server, client := newTransport(b, 1), newTransport(b, 1)
				serve(b, server)
				b.ReportAllocs()
				b.SetBytes(int64(64 * len(c.req.Entries[0].Data)))
				start := time.Now()
				for b.Loop() {
					var resp raft.AppendEntriesResponse
					if err := client.AppendEntries("s", server.LocalAddr(), c.req, &resp); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rt/s")
			})
		}
		b.Run(kind+"/pipeline4", func(b *testing.B) {
			server, client := newTransport(b, 4), newTransport(b, 4)
			serve(b, server)
			p, err := client.AppendEntriesPipeline("s", server.LocalAddr())
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			consumed := make(chan error, 1)
			b.ReportAllocs()
			b.SetBytes(64 * 1024)
			start := time.Now()
			n := b.N
			go func() {
				for range n {
					f := <-p.Consumer()
					if err := f.Error(); err != nil {
						consumed <- err
						return
					}
				}
				consumed <- nil
			}()
			for range n {
				if _, err := p.AppendEntries(req, new(raft.AppendEntriesResponse)); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-consumed; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "rt/s")
		})
	}
}

// msgpackHandle is the handle NetworkTransport encodes with.
func msgpackHandle() *codec.MsgpackHandle {
	h := &codec.MsgpackHandle{}
	h.TimeNotBuiltin = true
	return h
}
