package transport

import (
	"errors"
	"testing"
)

// oldStatusRequest and oldStatusResponse are StatusRequest and
// StatusResponse as peers older than StatusDetails declare them.
type (
	oldStatusRequest  struct{}
	oldStatusResponse struct {
		NodeID       string      `msgpack:"node_id"`
		Role         string      `msgpack:"role"`
		Voting       bool        `msgpack:"voting,omitempty"`
		LeaderID     string      `msgpack:"leader_id,omitempty"`
		LeaderAddr   string      `msgpack:"leader_addr,omitempty"`
		Term         uint64      `msgpack:"term"`
		FirstIndex   uint64      `msgpack:"first_index"`
		LastIndex    uint64      `msgpack:"last_index"`
		CommitIndex  uint64      `msgpack:"commit_index"`
		AppliedIndex uint64      `msgpack:"applied_index"`
		Store        StoreStatus `msgpack:"store"`
		Members      []Member    `msgpack:"members,omitempty"`
		Refusing     string      `msgpack:"refusing,omitempty"`
	}
)

// TestStatusDetailsCompatible checks that the details of a status travel
// only between peers that know them: a request without them and a reply
// without them are what older peers send and accept; older peers refuse a
// request or a reply with details, as BadRequest (the caller then asks
// again without), rather than misread them.
func TestStatusDetailsCompatible(t *testing.T) {
	plain, err := EncodeBody(&StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := DecodeBody(plain, &oldStatusRequest{}); err != nil {
		t.Errorf("an older node refuses a status request without details: %v", err)
	}
	withDetails, err := EncodeBody(&StatusRequest{Details: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := DecodeBody(withDetails, &oldStatusRequest{}); !errors.Is(err, ErrMalformedBody) {
		t.Errorf("an older node decodes a request for details: %v, want ErrMalformedBody", err)
	}

	resp := StatusResponse{NodeID: "n1", Role: "Leader", Term: 2, Members: []Member{{NodeID: "n1", RaftAddr: "h:1"}}}
	b, err := EncodeBody(&resp)
	if err != nil {
		t.Fatal(err)
	}
	var old oldStatusResponse
	if err := DecodeBody(b, &old); err != nil || old.NodeID != "n1" || old.Term != 2 {
		t.Errorf("an older client decodes a reply without details as %+v, %v", old, err)
	}
	resp.Details = &StatusDetails{Version: "v1.0.0", GoVersion: "go1.26.8", Platform: "linux/amd64", Flush: "sync"}
	if b, err = EncodeBody(&resp); err != nil {
		t.Fatal(err)
	}
	if err := DecodeBody(b, &oldStatusResponse{}); !errors.Is(err, ErrMalformedBody) {
		t.Errorf("an older client decodes a reply with details: %v, want ErrMalformedBody", err)
	}
}
