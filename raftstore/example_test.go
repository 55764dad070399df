package raftstore_test

import (
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/raftstore"
)

// Open a store and give it to raft as both its log store and its stable
// store. This single node uses an in-memory transport and snapshot store;
// a real node would use raft.NewTCPTransport and raft.NewFileSnapshotStore.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "raftstore-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	store, err := raftstore.Open(dir, nil) // nil: the defaults, SyncFlush
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	conf := raft.DefaultConfig()
	conf.LocalID = "node1"
	conf.HeartbeatTimeout = 50 * time.Millisecond
	conf.ElectionTimeout = 50 * time.Millisecond
	conf.LeaderLeaseTimeout = 50 * time.Millisecond
	conf.LogOutput = io.Discard
	addr, trans := raft.NewInmemTransport("node1")

	r, err := raft.NewRaft(conf, &lastValueFSM{}, store, store, raft.NewInmemSnapshotStore(), trans)
	if err != nil {
		log.Fatal(err)
	}

	boot := raft.Configuration{Servers: []raft.Server{{ID: conf.LocalID, Address: addr}}}
	if err := r.BootstrapCluster(boot).Error(); err != nil {
		log.Fatal(err)
	}
	select {
	case <-r.LeaderCh(): // a single node elects itself
	case <-time.After(10 * time.Second):
		log.Fatal("no leader")
	}

	f := r.Apply([]byte("hello"), 5*time.Second)
	if err := f.Error(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("applied:", f.Response())
	last, _ := store.LastIndex()
	fmt.Println("last index >= 1:", last >= 1)

	if err := r.Shutdown().Error(); err != nil { // before store.Close
		log.Fatal(err)
	}
	// Output:
	// applied: hello
	// last index >= 1: true
}

// lastValueFSM is a state machine that remembers the last command.
type lastValueFSM struct {
	value string // only raft's FSM goroutine touches it
}

func (f *lastValueFSM) Apply(l *raft.Log) any {
	f.value = string(l.Data)
	return f.value
}

func (f *lastValueFSM) Snapshot() (raft.FSMSnapshot, error) {
	return valueSnapshot(f.value), nil
}

func (f *lastValueFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	f.value = string(b)
	return err
}

type valueSnapshot string

func (s valueSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := io.WriteString(sink, string(s)); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (valueSnapshot) Release() {}
