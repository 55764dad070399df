package node

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// adminStatus is the JSON body of /status.
type adminStatus struct {
	Node    any               `json:"node"`
	Members []adminMember     `json:"members"`
	Clients map[string]string `json:"client_addrs"`
	// Logs are the logs whose replica runs here, the default log's
	// included, by name.
	Logs []logStatus `json:"logs"`
}

type adminMember struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	Suffrage string `json:"suffrage"`
}

// adminHandler serves /status (JSON), /metrics (metrics.go), and the
// probes /health (liveness: the process and its store work) and /ready
// (readiness: the node can serve clients), which health.go defines. Both
// answer 200 with a line saying what the node is, or 503 with a line
// saying why not.
//
// With Config.Pprof it also serves runtime profiles under /debug/pprof/
// (pprof.go).
//
// With TLS the admin server speaks HTTPS with the node's certificate. With
// TLS client authentication, /status, /metrics, the profiles and the fault
// endpoints need a client certificate signed by the CA, as the client port
// does; /health and /ready never do, so that probes that present none (a
// load balancer's, Kubernetes') can read them.
func (n *Node) adminHandler() http.Handler {
	mux := &certMux{ServeMux: http.NewServeMux(), need: n.tls != nil && n.tls.clientAuth}
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		st := adminStatus{Node: n.Status(), Clients: n.fsm.MemberAddrs(), Logs: n.logStatuses()}
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
	mux.open("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if why := n.unhealthy(); why != "" {
			http.Error(w, "unhealthy: "+why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok")
		if n.space.isBelow() {
			sp := n.space.report()
			fmt.Fprintf(w, "; data dir below its free-space reserve (%d MiB free, reserve %d MiB): appends are refused while this node leads",
				sp.free>>20, sp.reserve>>20)
		}
		fmt.Fprintln(w)
	})
	mux.open("GET /ready", func(w http.ResponseWriter, r *http.Request) {
		why, what := n.notReady(r.Context())
		if why != "" {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "ready: %s", what)
		if v := n.refusingAppends(); v != "" {
			fmt.Fprintf(w, "; refusing appends: %s", v)
		}
		fmt.Fprintln(w)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.metrics.reg, promhttp.HandlerOpts{}))
	if n.cfg.FaultInjection {
		n.faultHandlers(mux)
	}
	if n.cfg.Pprof {
		pprofHandlers(mux)
	}
	return mux.ServeMux
}

// certMux registers admin handlers: with need, every handler but the open
// ones answers 401 to a request without a verified client certificate.
type certMux struct {
	*http.ServeMux
	need bool
}

// HandleFunc registers a handler that needs a certificate.
func (m *certMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

// Handle registers a handler that needs a certificate.
func (m *certMux) Handle(pattern string, h http.Handler) {
	if !m.need {
		m.ServeMux.Handle(pattern, h)
		return
	}
	m.ServeMux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			http.Error(w, "a client certificate signed by the cluster's CA is required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
}

// open registers a handler anyone may call.
func (m *certMux) open(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.ServeMux.HandleFunc(pattern, h)
}
