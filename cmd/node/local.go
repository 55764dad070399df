package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlog/raftlog/node"
)

// localStartTimeout bounds the start of each node of a local cluster,
// its join included.
const localStartTimeout = 30 * time.Second

// localCluster is a 3-node cluster run in this process on 127.0.0.1, for
// demo and bench --local: n1 bootstraps alone, n2 and n3 join through it.
// Every port is picked by the system.
type localCluster struct {
	nodes []*node.Node // n1, n2, n3
}

// startLocalCluster starts a local cluster with its data under dir (one
// directory per node) and its logs written to logs.
func startLocalCluster(ctx context.Context, dir string, flush node.FlushMode, logs io.Writer) (*localCluster, error) {
	logger := hclog.New(&hclog.LoggerOptions{Name: "raftlog", Level: hclog.Info, Output: logs})
	lc := &localCluster{}
	for _, id := range []string{"n1", "n2", "n3"} {
		cfg := node.Config{
			ID:         id,
			DataDir:    filepath.Join(dir, id),
			RaftAddr:   "127.0.0.1:0",
			ClientAddr: "127.0.0.1:0",
			AdminAddr:  "127.0.0.1:0",
			Flush:      flush,
			Logger:     logger,
		}
		if id == "n1" {
			cfg.Bootstrap = []node.Peer{{ID: id, RaftAddr: cfg.RaftAddr}}
		} else {
			cfg.Join = []string{lc.nodes[0].ClientAddr()}
		}
		sctx, cancel := context.WithTimeout(ctx, localStartTimeout)
		n, err := node.Start(sctx, cfg)
		cancel()
		if err != nil {
			lc.close()
			return nil, fmt.Errorf("starting %s: %w", id, err)
		}
		lc.nodes = append(lc.nodes, n)
	}
	// Joined nodes start as nonvoters and become voters once caught up.
	wctx, cancel := context.WithTimeout(ctx, localStartTimeout)
	defer cancel()
	for _, n := range lc.nodes {
		select {
		case <-n.Voting():
		case <-wctx.Done():
			lc.close()
			return nil, fmt.Errorf("%s did not become a voter: %w", n.ID(), wctx.Err())
		}
	}
	return lc, nil
}

// clientAddrs returns the client addresses of the nodes.
func (lc *localCluster) clientAddrs() []string {
	addrs := make([]string, len(lc.nodes))
	for i, n := range lc.nodes {
		addrs[i] = n.ClientAddr()
	}
	return addrs
}

// close closes the nodes, the leader last.
func (lc *localCluster) close() error {
	order := make([]*node.Node, 0, len(lc.nodes))
	var leaders []*node.Node
	for _, n := range lc.nodes {
		if n.IsLeader() {
			leaders = append(leaders, n)
		} else {
			order = append(order, n)
		}
	}
	var errs []error
	for _, n := range append(order, leaders...) {
		if err := n.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing %s: %w", n.ID(), err))
		}
	}
	return errors.Join(errs...)
}

// tempOrGiven returns dir, created if need be and required to be empty, or,
// when dir is "", a new temporary directory named after prefix under
// $TMPDIR. remove removes the temporary directory and does nothing for a
// given one.
func tempOrGiven(dir, prefix string) (path string, remove func(), err error) {
	if dir == "" {
		path, err := os.MkdirTemp("", prefix)
		if err != nil {
			return "", nil, err
		}
		return path, func() { os.RemoveAll(path) }, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", nil, err
	}
	if len(entries) > 0 {
		return "", nil, fmt.Errorf("%s is not empty: a local cluster picks new ports every run, so it cannot restart from old data; give an empty or new directory", dir)
	}
	return dir, func() {}, nil
}
