package node

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// adminStatus is the JSON body of /status.
type adminStatus struct {
	Node    any               `json:"node"`
	Members []adminMember     `json:"members"`
	Clients map[string]string `json:"client_addrs"`
}

type adminMember struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	Suffrage string `json:"suffrage"`
}

// adminHandler serves /status (JSON), /health (the process serves) and
// /ready (the node can take appends: it knows a leader, its data dir is
// above its free-space reserve, and, on the leader, a quorum of voters can
// store; see space.go). A node below its reserve is healthy: /health
// answers 200 and says so in its body; /ready answers 503 with the reason.
func (n *Node) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		st := adminStatus{Node: n.Status(), Clients: n.fsm.memberAddrs()}
		if f := n.raft.GetConfiguration(); f.Error() == nil {
			for _, s := range f.Configuration().Servers {
				st.Members = append(st.Members, adminMember{ID: string(s.ID), RaftAddr: string(s.Address), Suffrage: s.Suffrage.String()})
			}
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(st)
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if n.removed.Load() {
			http.Error(w, "removed from the cluster", http.StatusServiceUnavailable)
			return
		}
		if n.raft.State() == raft.Shutdown {
			http.Error(w, "raft is shut down", http.StatusServiceUnavailable)
			return
		}
		if n.space.isBelow() {
			sp := n.space.report()
			fmt.Fprintf(w, "ok; data dir below its free-space reserve (%d MiB free, reserve %d MiB): appends are refused while this node leads\n",
				sp.free>>20, sp.reserve>>20)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, r *http.Request) {
		if addr, _ := n.raft.LeaderWithID(); addr == "" {
			http.Error(w, "no leader known", http.StatusServiceUnavailable)
			return
		}
		if n.space.isBelow() {
			sp := n.space.report()
			http.Error(w, fmt.Sprintf("not ready for appends: data dir below its free-space reserve (%d MiB free, reserve %d MiB)",
				sp.free>>20, sp.reserve>>20), http.StatusServiceUnavailable)
			return
		}
		if v := n.space.verdict.Load(); v != nil && n.raft.State() == raft.Leader {
			http.Error(w, "not ready for appends: "+v.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.metrics.reg, promhttp.HandlerOpts{}))
	if n.cfg.FaultInjection {
		n.faultHandlers(mux)
	}
	return mux
}
