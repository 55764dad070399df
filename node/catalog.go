package node

// The catalog of named logs (package catalog) rides on the default log:
// its commands are control commands of the default log (replica.Control),
// ordered, replicated and made durable as the log's records are, and its
// state is part of the default log's snapshots and backups. The metadata
// group of the cluster is so the default log's raft group, whose voters
// are the cluster's voters; every node, voter or not, applies the default
// log and so holds the catalog.
//
// The default log's leader proposes catalog commands. The catalog starts
// (catalog.Start: the nodes of the default log's configuration, the
// default log's members) with the first operation that needs it, a
// CreateLog. Before that the default log's state holds the catalog only
// once it has the cluster's id (clusterid.go).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/raftlog/raftlog/catalog"
	"github.com/raftlog/raftlog/replica"
	"github.com/raftlog/raftlog/transport"
)

// catalogControl is the catalog as the default log's control state machine.
type catalogControl struct{ fsm *catalog.FSM }

// ApplyControl applies a catalog command; its result is a catalog.Result.
func (c catalogControl) ApplyControl(index uint64, data []byte) any {
	cmd, err := catalog.Decode(data)
	if err != nil {
		return catalog.Result{Err: err}
	}
	return c.fsm.ApplyCommand(index, cmd)
}

// ControlState encodes the catalog; nil before it started or took the
// cluster's id.
func (c catalogControl) ControlState() []byte {
	s := c.fsm.State()
	if !s.Started() && s.ClusterID().IsZero() {
		return nil
	}
	return catalog.AppendSnapshot(nil, s)
}

// RestoreControl replaces the catalog; empty means the initial one.
func (c catalogControl) RestoreControl(state []byte) error {
	if len(state) == 0 {
		state = catalog.AppendSnapshot(nil, catalog.New().State())
	}
	return c.fsm.Restore(io.NopCloser(bytes.NewReader(state)))
}

// proposeCatalog commits a catalog command through the default log, on
// its leader, and returns the catalog's result.
func (n *Node) proposeCatalog(ctx context.Context, cmd catalog.Command) (catalog.Result, error) {
	if _, err := n.log.Leading(ctx); err != nil {
		return catalog.Result{}, err
	}
	f := n.log.Apply(replica.EncodeControlCmd(catalog.Encode(cmd)), replica.EnqueueTimeout)
	if err := f.Error(); err != nil {
		return catalog.Result{}, n.raftError(err)
	}
	res, ok := f.Response().(catalog.Result)
	if !ok {
		return catalog.Result{}, fmt.Errorf("node: a catalog command answered %T: %v", f.Response(), f.Response())
	}
	return res, nil
}

// syncCatalog, on the default log's leader, starts the catalog if it has
// not started, and adds the nodes of the default log's configuration it
// lacks or knows at other addresses.
func (n *Node) syncCatalog(ctx context.Context) error {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return n.raftError(err)
	}
	servers := f.Configuration().Servers
	s := n.catalog.State()
	if !s.Started() {
		// The default log gets no members in the catalog: its members are
		// the cluster's voters (joins and removals change them, not
		// replica moves), so it is neither placed, counted nor moved.
		start := &catalog.Start{}
		for _, srv := range servers {
			id := string(srv.ID)
			start.Nodes = append(start.Nodes, catalog.Node{ID: id, RaftAddr: string(srv.Address), ClientAddr: n.fsm.Member(id)})
		}
		res, err := n.proposeCatalog(ctx, start)
		if err != nil {
			return err
		}
		if res.Err != nil && !errors.Is(res.Err, catalog.ErrExists) {
			return fmt.Errorf("node: start the catalog: %w", res.Err)
		}
		s = n.catalog.State()
	}
	for _, srv := range servers {
		id := string(srv.ID)
		want := catalog.Node{ID: id, RaftAddr: string(srv.Address), ClientAddr: n.fsm.Member(id)}
		if have, ok := s.Node(id); ok && have.RaftAddr == want.RaftAddr && (want.ClientAddr == "" || have.ClientAddr == want.ClientAddr) {
			continue
		}
		res, err := n.proposeCatalog(ctx, &catalog.AddNode{ID: want.ID, RaftAddr: want.RaftAddr, ClientAddr: want.ClientAddr})
		if err != nil {
			return err
		}
		if res.Err != nil {
			return fmt.Errorf("node: add node %s to the catalog: %w", id, res.Err)
		}
	}
	return nil
}

// catalogError turns a refusal of the catalog into the error a client
// sees.
func catalogError(name string, err error) error {
	switch {
	case errors.Is(err, catalog.ErrExists):
		return transport.DuplicateLog(name)
	case errors.Is(err, catalog.ErrNotFound), errors.Is(err, catalog.ErrDeleting):
		return transport.NotFoundLog(name)
	case errors.Is(err, catalog.ErrTooFewNodes):
		return &transport.Error{Code: transport.CodeFailedPrecondition, Message: err.Error()}
	case errors.Is(err, catalog.ErrConflict):
		return &transport.Error{Code: transport.CodeUnavailable, Message: err.Error() + "; retry"}
	}
	return &transport.Error{Code: transport.CodeBadRequest, Message: err.Error()}
}

// logInfo describes a catalog record in the client protocol's terms.
func logInfo(l catalog.Log) transport.LogInfo {
	st := transport.LogActive
	if l.State == catalog.LogDeleting {
		st = transport.LogDeleting
	}
	return transport.LogInfo{
		Name: l.Name, ID: l.ID, Replicas: uint32(l.Settings.Replicas),
		RetentionBytes: uint64(max(l.Settings.RetentionBytes, 0)), RetentionAge: l.Settings.RetentionAge,
		State: st, Members: slices.Clone(l.Members),
	}
}
