package transport

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"testing"

	"github.com/hashicorp/raft"
)

// FuzzRaftRequest feeds arbitrary bodies to every request decoder. A
// decoder must never panic, must fail only with ErrMalformedBody, and a
// body it accepts must encode again to exactly the same bytes (a body has
// one meaning).
func FuzzRaftRequest(f *testing.F) {
	for _, req := range sampleRaftRequests() {
		k := kindOf(req)
		body, err := appendRequest(nil, k, req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(byte(k), body)
	}
	f.Add(byte(raftAppendEntries), []byte{0, 0, 0, 1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, kb byte, body []byte) {
		k := raftKind(kb%5 + 1)
		v, err := decodeRequest(k, body)
		if err != nil {
			if !errors.Is(err, ErrMalformedBody) {
				t.Fatalf("%v: error %v is not ErrMalformedBody", k, err)
			}
			return
		}
		again, err := appendRequest(nil, k, v)
		if err != nil {
			t.Fatalf("%v: re-encoding a decoded request: %v", k, err)
		}
		if !bytes.Equal(again, body) {
			t.Fatalf("%v: body %x decodes to %#v, which encodes to %x", k, body, v, again)
		}
	})
}

// FuzzRaftResponse does the same for every response decoder.
func FuzzRaftResponse(f *testing.F) {
	for _, resp := range sampleRaftResponses() {
		k := kindOf(resp)
		f.Add(byte(k), appendResponse(nil, k, resp, nil))
		f.Add(byte(k), appendResponse(nil, k, resp, errors.New("failed")))
	}
	f.Fuzz(func(t *testing.T, kb byte, body []byte) {
		k := raftKind(kb%5 + 1)
		resp := newResponse(k)
		msg, err := decodeResponse(k, body, resp)
		if err != nil {
			if !errors.Is(err, ErrMalformedBody) {
				t.Fatalf("%v: error %v is not ErrMalformedBody", k, err)
			}
			return
		}
		var rpcErr error
		if msg != "" {
			rpcErr = errors.New(msg)
		}
		if again := appendResponse(nil, k, resp, rpcErr); !bytes.Equal(again, body) {
			t.Fatalf("%v: body %x decodes to %#v, %q, which encode to %x", k, body, resp, msg, again)
		}
	})
}

// FuzzReadRaftFrame feeds arbitrary streams to the frame reader. It must
// never panic, must fail only with the documented errors, and every frame
// it accepts must encode again to exactly the bytes it consumed.
func FuzzReadRaftFrame(f *testing.F) {
	body, _ := appendRequest(nil, raftRequestVote, &raft.RequestVoteRequest{Term: 3})
	f.Add(frameBytes(uint32(raftHeaderSize+len(body)), raftRequestVote, 0, 0, body))
	f.Add(frameBytes(raftHeaderSize, raftTimeoutNow, 0, 1<<40, nil))
	f.Add(frameBytes(raftHeaderSize, raftTimeoutNow|raftResponseBit, 0, math.MaxUint64, nil))
	f.Add(frameBytes(0xffffffff, raftAppendEntries, 0, 0, nil))
	f.Add(appendRaftPreamble(nil))
	f.Add([]byte{0, 0})
	const maxSize = 64 << 10
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReader(bytes.NewReader(in))
		consumed := 0
		for {
			fr, err := readRaftFrame(r, maxSize, nil)
			if err != nil {
				switch {
				case err == io.EOF, errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, ErrMalformedFrame),
					errors.Is(err, ErrFrameTooLarge), errors.Is(err, ErrRaftPeerVersion):
				default:
					t.Fatalf("undocumented error %v", err)
				}
				return
			}
			b := appendRaftHeader(nil, fr.kind, fr.group)
			b = append(b, fr.body...)
			if err := finishRaftFrame(b, 0, 0, maxSize); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, in[consumed:consumed+len(b)]) {
				t.Fatalf("frame %+v encodes to %x, read from %x", fr, b, in[consumed:consumed+len(b)])
			}
			consumed += len(b)
		}
	})
}
