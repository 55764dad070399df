package node

import (
	"fmt"
	"net/http"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"time"
)

// Profiling endpoints of the admin server (Config.Pprof), in the layout of
// net/http/pprof so that `go tool pprof http://host:port/debug/pprof/profile`
// works:
//
//	GET /debug/pprof/                  the profiles, as text
//	GET /debug/pprof/profile?seconds=N a CPU profile over N seconds (default 30)
//	GET /debug/pprof/trace?seconds=N   an execution trace over N seconds (default 1)
//	GET /debug/pprof/{name}?debug=D    a named profile: heap, allocs, goroutine,
//	                                   block, mutex, threadcreate; debug=0 (default)
//	                                   is the binary format, 1 and 2 are text
//	                                   (?gc=1 runs a GC before a heap profile)
//
// net/http/pprof itself is not imported: its init registers these handlers
// on http.DefaultServeMux, which would expose them in any program that
// embeds this package and serves the default mux, whatever Config.Pprof
// says.

// maxProfileSeconds bounds the seconds of a CPU profile or trace.
const maxProfileSeconds = 600

// pprofHandlers registers the profiling endpoints on mux. Every one of
// them needs a client certificate when the admin port does (certMux).
func pprofHandlers(mux *certMux) {
	mux.HandleFunc("GET /debug/pprof/{$}", pprofIndex)
	mux.HandleFunc("GET /debug/pprof/profile", pprofCPU)
	mux.HandleFunc("GET /debug/pprof/trace", pprofTrace)
	mux.HandleFunc("GET /debug/pprof/{name}", pprofNamed)
}

// pprofIndex lists the profiles.
func pprofIndex(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "profiles (GET /debug/pprof/<name>?debug=1 for text):\n")
	for _, p := range pprof.Profiles() {
		fmt.Fprintf(w, "%8d %s\n", p.Count(), p.Name())
	}
	fmt.Fprintf(w, "\nprofile?seconds=30  CPU profile\ntrace?seconds=1     execution trace\n")
}

// profileSeconds reads the seconds parameter of r: def when absent, an
// error for anything but an integer in [1, maxProfileSeconds].
func profileSeconds(r *http.Request, def int) (time.Duration, error) {
	s := r.URL.Query().Get("seconds")
	if s == "" {
		return time.Duration(def) * time.Second, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxProfileSeconds {
		return 0, fmt.Errorf("seconds=%q: want an integer in [1, %d]", s, maxProfileSeconds)
	}
	return time.Duration(n) * time.Second, nil
}

// waitOrGone waits d, or less if the client goes away.
func waitOrGone(r *http.Request, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
}

// pprofCPU writes a CPU profile over the seconds asked for. One CPU
// profile runs at a time in a process: a second request meanwhile gets 409.
func pprofCPU(w http.ResponseWriter, r *http.Request) {
	d, err := profileSeconds(r, 30)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="profile"`)
	if err := pprof.StartCPUProfile(w); err != nil {
		w.Header().Del("Content-Disposition")
		http.Error(w, "cannot start a CPU profile: "+err.Error(), http.StatusConflict)
		return
	}
	waitOrGone(r, d)
	pprof.StopCPUProfile()
}

// pprofTrace writes an execution trace over the seconds asked for; one at
// a time, like CPU profiles.
func pprofTrace(w http.ResponseWriter, r *http.Request) {
	d, err := profileSeconds(r, 1)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="trace"`)
	if err := trace.Start(w); err != nil {
		w.Header().Del("Content-Disposition")
		http.Error(w, "cannot start a trace: "+err.Error(), http.StatusConflict)
		return
	}
	waitOrGone(r, d)
	trace.Stop()
}

// pprofNamed writes a named runtime profile.
func pprofNamed(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	p := pprof.Lookup(name)
	if p == nil {
		http.Error(w, fmt.Sprintf("no profile %q (see /debug/pprof/)", name), http.StatusNotFound)
		return
	}
	debug := 0
	if s := r.URL.Query().Get("debug"); s != "" {
		var err error
		if debug, err = strconv.Atoi(s); err != nil || debug < 0 || debug > 2 {
			http.Error(w, fmt.Sprintf("debug=%q: want 0, 1 or 2", s), http.StatusBadRequest)
			return
		}
	}
	if name == "heap" && r.URL.Query().Get("gc") != "" {
		runtime.GC()
	}
	if debug == 0 {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
	} else {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	}
	p.WriteTo(w, debug)
}
