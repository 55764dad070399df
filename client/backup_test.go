package client

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlog/raftlog/transport"
)

// backupServer is a member that serves Backup streams by calling serve,
// and answers every unary request with its status.
type backupServer struct {
	addr  string
	serve func(ctx context.Context, s *transport.ServerStream) error
	calls atomic.Int32 // Backup streams begun
}

func (b *backupServer) Handle(ctx context.Context, op transport.Op, req any) (any, error) {
	return &transport.StatusResponse{NodeID: b.addr}, nil
}

func (b *backupServer) Stream(ctx context.Context, op transport.Op, req any, s *transport.ServerStream) error {
	if _, ok := req.(*transport.BackupRequest); !ok {
		return &transport.Error{Code: transport.CodeUnknownOp, Message: op.String()}
	}
	b.calls.Add(1)
	return b.serve(ctx, s)
}

// startBackupServer serves b on a loopback listener until the test ends.
func startBackupServer(t *testing.T, b *backupServer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { transport.Serve(ctx, nc, b, transport.Limits{}) })
		}
	})
}

// sendItems sends the items, then ends the stream with end.
func sendItems(items []string, end error) func(context.Context, *transport.ServerStream) error {
	return func(_ context.Context, s *transport.ServerStream) error {
		for _, it := range items {
			if err := s.Send(&transport.BackupItem{Data: []byte(it)}); err != nil {
				return err
			}
		}
		return end
	}
}

// Backup follows the leader and writes every item in order.
func TestBackupFollowsLeader(t *testing.T) {
	leader := &backupServer{serve: sendItems([]string{"RLBACKUP", "-one", "-two"}, nil)}
	startBackupServer(t, leader)
	follower := &backupServer{}
	follower.serve = func(context.Context, *transport.ServerStream) error {
		return &transport.Error{Code: transport.CodeNotLeader, LeaderAddr: leader.addr}
	}
	startBackupServer(t, follower)
	c := dialT(t, []string{follower.addr}, fastOptions())
	var buf bytes.Buffer
	n, err := c.Backup(testCtx(t), &buf)
	if err != nil || n != int64(buf.Len()) || buf.String() != "RLBACKUP-one-two" {
		t.Fatalf("Backup: %d bytes %q, %v", n, buf.String(), err)
	}
	if follower.calls.Load() != 1 || leader.calls.Load() != 1 {
		t.Fatalf("%d backups asked of the follower, %d of the leader; want 1 and 1", follower.calls.Load(), leader.calls.Load())
	}
}

// Once bytes were written, a failure ends the backup: it is not repeated
// into the same writer.
func TestBackupFailsOnceStarted(t *testing.T) {
	fail := &transport.Error{Code: transport.CodeUnavailable, Message: "node is shutting down"}
	b := &backupServer{serve: sendItems([]string{"RLBACKUP"}, fail)}
	startBackupServer(t, b)
	c := dialT(t, []string{b.addr}, fastOptions())
	var buf bytes.Buffer
	n, err := c.Backup(testCtx(t), &buf)
	if !errors.Is(err, fail) || n != 8 || !strings.Contains(err.Error(), "after 8 bytes") {
		t.Fatalf("Backup: %d bytes, %v; want 8 and %v", n, err, fail)
	}
	if b.calls.Load() != 1 {
		t.Fatalf("%d attempts, want 1", b.calls.Load())
	}

	// Nor after the writer failed.
	b.serve = sendItems([]string{"RLBACKUP", "more"}, nil)
	disk := errors.New("no space left on device")
	_, err = c.Backup(testCtx(t), failingWriter{disk})
	if !errors.Is(err, disk) || b.calls.Load() != 2 {
		t.Fatalf("Backup into a failing writer: %v after %d attempts; want %v after 2", err, b.calls.Load(), disk)
	}
}

type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }

// A stream that stops sending ends the backup after RequestTimeout.
func TestBackupStalls(t *testing.T) {
	b := &backupServer{}
	b.serve = func(ctx context.Context, s *transport.ServerStream) error {
		if err := s.Send(&transport.BackupItem{Data: []byte("RLBACKUP")}); err != nil {
			return err
		}
		<-ctx.Done() // until the client gives up
		return ctx.Err()
	}
	startBackupServer(t, b)
	opts := fastOptions()
	opts.RequestTimeout = 200 * time.Millisecond
	c := dialT(t, []string{b.addr}, opts)
	var buf bytes.Buffer
	_, err := c.Backup(testCtx(t), &buf)
	if !errors.Is(err, errStalled) || !errors.Is(err, context.DeadlineExceeded) || buf.String() != "RLBACKUP" {
		t.Fatalf("Backup of a stalled stream: %q, %v", buf.String(), err)
	}
}
