package node

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/raftlog/raftlog/transport"
)

func TestAppendReadStatus(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	conn := dial(t, leader)
	var want [][]byte
	var indexes []uint64
	for i := range 20 {
		recs := [][]byte{[]byte(fmt.Sprintf("a%d", i)), []byte(fmt.Sprintf("b%d", i))}
		resp, err := call[transport.AppendResponse](t, conn, transport.OpAppend, &transport.AppendRequest{Records: recs})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Indexes) != 2 || resp.Indexes[1] <= resp.Indexes[0] {
			t.Fatalf("indexes %v", resp.Indexes)
		}
		want = append(want, recs...)
		indexes = append(indexes, resp.Indexes...)
	}
	rr, err := call[transport.ReadResponse](t, conn, transport.OpRead, &transport.ReadRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rr.Records) != len(want) {
		t.Fatalf("read %d records, want %d", len(rr.Records), len(want))
	}
	for i, r := range rr.Records {
		if !bytes.Equal(r.Data, want[i]) || r.Index != indexes[i] {
			t.Fatalf("record %d: %q at %d, want %q at %d", i, r.Data, r.Index, want[i], indexes[i])
		}
	}
	st, err := call[transport.StatusResponse](t, conn, transport.OpStatus, &transport.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Role != "Leader" || st.LeaderID != leader.ID() || st.LeaderAddr != leader.ClientAddr() {
		t.Fatalf("status %+v", st)
	}
	t.Logf("status %+v", st)
}
