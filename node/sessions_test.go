package node

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/replica"
	"github.com/raftlog/raftlog/transport"
)

// Through the client protocol and the Go client: once a client's session
// is evicted, a retry of an append it stored is refused with
// SessionExpired and not stored again; a Client that reuses the id is
// refused at once; the Client that owns the id goes on.
func TestSessionExpiredEndToEnd(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	leader := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := &client.Options{ClientID: "owner", RetryTimeout: 30 * time.Second}
	owner, err := client.Dial(ctx, []string{leader.ClientAddr()}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	for _, rec := range []string{"a", "b"} { // sequence numbers 1 and 2
		if _, err := owner.Append(ctx, []byte(rec)); err != nil {
			t.Fatal(err)
		}
	}

	// replica.MaxSessions other clients append once each, 64 at a time.
	conn := dial(t, leader)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < replica.MaxSessions; i += 64 {
				req := &transport.AppendRequest{ClientID: fmt.Sprintf("filler-%d", i), Seq: 1, Base: 1, Records: [][]byte{[]byte("f")}}
				if err := conn.Call(ctx, transport.OpAppend, req, &transport.AppendResponse{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("filler append: %v", err)
	}

	// The owner's reply to sequence number 2 was lost; it retries.
	_, err = call[transport.AppendResponse](t, conn, transport.OpAppend,
		&transport.AppendRequest{ClientID: "owner", Seq: 2, Base: 2, Records: [][]byte{[]byte("b")}})
	if transport.ErrorCode(err) != transport.CodeSessionExpired || !strings.Contains(err.Error(), "new client id") {
		t.Fatalf("retry after eviction: %v, want SessionExpired saying what to do", err)
	}

	// A new Client under the same id (a restarted process that reuses it)
	// is refused at once.
	again, err := client.Dial(ctx, []string{leader.ClientAddr()}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	start := time.Now()
	if _, err := again.Append(ctx, []byte("c")); transport.ErrorCode(err) != transport.CodeSessionExpired {
		t.Fatalf("append of a new Client under an evicted id: %v, want SessionExpired", err)
	} else if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("SessionExpired took %v: it was retried", d)
	}

	// The owner has finished with 1 and 2: its next append is stored.
	idx, err := owner.Append(ctx, []byte("d"))
	if err != nil {
		t.Fatalf("owner's next append: %v", err)
	}
	counts := map[string]int{}
	for from := uint64(1); from <= idx[0]; {
		recs, next, err := owner.Read(ctx, from, client.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			counts[string(r.Data)]++
		}
		from = next
	}
	if counts["a"] != 1 || counts["b"] != 1 || counts["c"] != 0 || counts["d"] != 1 || counts["f"] != replica.MaxSessions {
		t.Fatalf("records stored: %v (d at %v)", counts, idx)
	}
}
