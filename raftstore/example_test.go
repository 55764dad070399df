package raftstore_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
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

// Open one DB and run two raft groups on it: their StoreLogs calls share
// the DB's commit log and its group commit. Each group's raft shuts down
// before the DB closes.
func ExampleOpenDB() {
	dir, err := os.MkdirTemp("", "raftstore-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	db, err := raftstore.OpenDB(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	var rafts []*raft.Raft
	for _, group := range []uint64{1, 2} {
		store, err := db.Store(group) // created on first use
		if err != nil {
			log.Fatal(err)
		}
		id := raft.ServerID(fmt.Sprintf("node1-group%d", group))
		conf := raft.DefaultConfig()
		conf.LocalID = id
		conf.HeartbeatTimeout = 50 * time.Millisecond
		conf.ElectionTimeout = 50 * time.Millisecond
		conf.LeaderLeaseTimeout = 50 * time.Millisecond
		conf.LogOutput = io.Discard
		addr, trans := raft.NewInmemTransport(raft.ServerAddress(id))
		r, err := raft.NewRaft(conf, &lastValueFSM{}, store, store, raft.NewInmemSnapshotStore(), trans)
		if err != nil {
			log.Fatal(err)
		}
		boot := raft.Configuration{Servers: []raft.Server{{ID: id, Address: addr}}}
		if err := r.BootstrapCluster(boot).Error(); err != nil {
			log.Fatal(err)
		}
		rafts = append(rafts, r)
	}
	for i, r := range rafts {
		select {
		case <-r.LeaderCh():
		case <-time.After(10 * time.Second):
			log.Fatal("no leader")
		}
		f := r.Apply([]byte(fmt.Sprintf("hello from group %d", i+1)), 5*time.Second)
		if err := f.Error(); err != nil {
			log.Fatal(err)
		}
		fmt.Println(f.Response())
	}
	fmt.Println("groups:", db.Groups())

	for _, r := range rafts {
		if err := r.Shutdown().Error(); err != nil { // before db.Close
			log.Fatal(err)
		}
	}
	// Output:
	// hello from group 1
	// hello from group 2
	// groups: [1 2]
}

// Migrate a raft log and its terms and votes into a new store, with a
// deadline and progress reports. The old store here is raft's in-memory
// one; a service leaving raft-boltdb opens its raft.db read-only instead
// (raftboltdb.New with bbolt.Options{ReadOnly: true}), with its raft node
// stopped.
func ExampleMigrateContext() {
	old := raft.NewInmemStore()
	for i := uint64(1); i <= 3000; i++ {
		l := &raft.Log{Index: i, Term: 1 + i/1000, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("entry %d", i))}
		if err := old.StoreLog(l); err != nil {
			log.Fatal(err)
		}
	}
	old.SetUint64([]byte("CurrentTerm"), 4)
	old.SetUint64([]byte("LastVoteTerm"), 4)
	old.Set([]byte("LastVoteCand"), []byte("node2"))

	dir, err := os.MkdirTemp("", "raftstore-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// Next to a raft.db, Open refuses an empty store (ErrBoltDBFound):
	// IgnoreBoltDB says this one is the migration's destination.
	path := filepath.Join(dir, "raftstore")
	dst, err := raftstore.Open(path, &raftstore.Options{IgnoreBoltDB: true})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = raftstore.MigrateContext(ctx, dst, old, old, &raftstore.MigrateOptions{
		Progress: func(p raftstore.MigrateProgress) {
			if p.Done {
				fmt.Printf("copied %d entries (%d..%d) and %d stable keys\n", p.Copied, p.First, p.Last, p.Keys)
			} else {
				fmt.Printf("%d of %d entries\n", p.Copied, p.Last-p.First+1)
			}
		},
	})
	if err != nil {
		// A migration that stopped half way leaves dst refused by Open
		// (ErrMigrationIncomplete): remove it and migrate again.
		log.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		log.Fatal(err)
	}

	// The node starts on the new store.
	store, err := raftstore.Open(path, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	last, _ := store.LastIndex()
	term, _ := store.GetUint64([]byte("CurrentTerm"))
	fmt.Printf("last index %d, term %d\n", last, term)
	// Output:
	// 1024 of 3000 entries
	// 2048 of 3000 entries
	// 3000 of 3000 entries
	// copied 3000 entries (1..3000) and 3 stable keys
	// last index 3000, term 4
}
