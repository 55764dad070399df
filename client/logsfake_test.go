package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/raftlog/raftlog/transport"
)

// logsCluster is a cluster of in-memory members serving named logs with
// transport.Serve on 127.0.0.1 listeners, as a node of issue #15 would:
// every log has its own leader and records and keeps its own sessions;
// the catalog has a leader of its own. A member that does not lead a log
// answers NotLeader naming the log's leader, or, when the log has none,
// the member the test chose as the hint (or none).
type logsCluster struct {
	waker          // t, and mu, which guards the fields below and every fakeLog
	addrs []string // immutable: the members' client addresses

	logs    map[string]*fakeLog // by name, the default log's included
	nextID  uint64              // id of the next log created
	catalog int                 // index of the catalog's leader
	reqs    map[logReqKey]int   // requests handled, per member, log and op
	refused map[logReqKey]int   // NotLeader answers, per member, log and op
	conns   map[net.Conn]int    // open connections, to their member
}

type logReqKey struct {
	m   int
	log string
	op  transport.Op
}

// fakeLog is one log of a logsCluster.
type fakeLog struct {
	id       uint64
	leader   int   // index of the leading member; -1 for none
	hint     int   // with no leader, the member NotLeader names; -1 for none
	members  []int // the members holding it
	records  []transport.Record
	sessions map[string]*fakeSession // duplicate suppression, per client id
	seqs     map[string][]uint64     // sequence numbers stored, per client id, in order
	bases    map[string][]uint64     // session bases of the appends stored, per client id
	drop     int                     // drop the connection after storing this many more appends; 0: never
	// upload is the restore being uploaded, to member uploadOn; restored
	// the last one restored; restoreHook, when set, sees each part first
	// (and may move the leadership).
	upload      []byte
	uploadOn    int
	restored    []byte
	restoreHook func(m int, r *transport.RestoreLogRequest) error
}

// newLogsCluster starts n members; member 0 leads the default log and the
// catalog.
func newLogsCluster(t *testing.T, n int) *logsCluster {
	t.Helper()
	lc := &logsCluster{
		waker:   newWaker(t),
		logs:    map[string]*fakeLog{},
		nextID:  1,
		reqs:    map[logReqKey]int{},
		refused: map[logReqKey]int{},
		conns:   map[net.Conn]int{},
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	lc.logs[transport.DefaultLog] = newFakeLog(0, 0, all)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var lns []net.Listener
	t.Cleanup(func() {
		cancel()
		for _, ln := range lns {
			ln.Close()
		}
		lc.mu.Lock()
		for nc := range lc.conns {
			nc.Close()
		}
		lc.mu.Unlock()
		wg.Wait()
	})
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		lc.addrs = append(lc.addrs, ln.Addr().String())
		wg.Go(func() {
			for {
				nc, err := ln.Accept()
				if err != nil {
					return
				}
				lc.mu.Lock()
				lc.conns[nc] = i
				lc.mu.Unlock()
				wg.Go(func() {
					transport.Serve(ctx, nc, &logsHandler{lc: lc, m: i, nc: nc}, transport.Limits{})
					lc.mu.Lock()
					delete(lc.conns, nc)
					lc.mu.Unlock()
				})
			}
		})
	}
	return lc
}

func newFakeLog(id uint64, leader int, members []int) *fakeLog {
	return &fakeLog{
		id: id, leader: leader, hint: -1, members: members,
		sessions: map[string]*fakeSession{}, seqs: map[string][]uint64{}, bases: map[string][]uint64{},
	}
}

// addLog adds the log name, led by leader and held by members, as if
// created.
func (lc *logsCluster) addLog(name string, leader int, members ...int) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	lc.logs[name] = newFakeLog(lc.nextID, leader, members)
	lc.nextID++
}

// setLeader makes member i lead the log name (-1: none) and, with no
// leader, hint name member (-1: none) in NotLeader answers.
func (lc *logsCluster) setLeader(name string, i, hint int) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	lc.logs[name].leader, lc.logs[name].hint = i, hint
	lc.pokeLocked()
}

// counts returns the requests handled and the NotLeader answers given for
// the log name, per member, of op.
func (lc *logsCluster) counts(name string, op transport.Op) (handled, refused []int) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for i := range lc.addrs {
		handled = append(handled, lc.reqs[logReqKey{i, name, op}])
		refused = append(refused, lc.refused[logReqKey{i, name, op}])
	}
	return handled, refused
}

// logsHandler serves one connection of member m.
type logsHandler struct {
	lc *logsCluster // immutable
	m  int          // immutable
	nc net.Conn     // immutable
}

// notLeaderLocked is the NotLeader answer of member m for the log name:
// naming its leader, else its hint.
func (h *logsHandler) notLeaderLocked(name string, op transport.Op, l *fakeLog) error {
	lc := h.lc
	lc.refused[logReqKey{h.m, name, op}]++
	e := &transport.Error{Code: transport.CodeNotLeader, Message: fmt.Sprintf("n%d does not lead log %q", h.m, name)}
	switch {
	case l.leader >= 0:
		e.LeaderID, e.LeaderAddr = "n"+strconv.Itoa(l.leader), lc.addrs[l.leader]
	case l.hint >= 0:
		e.MemberID, e.MemberAddr = "n"+strconv.Itoa(l.hint), lc.addrs[l.hint]
	}
	return e
}

// logLocked counts a request of op for the log named by the log field
// field and returns the log, or the error of a request naming a log that
// does not exist, or NotLeader when m does not lead it.
func (h *logsHandler) logLocked(field string, op transport.Op, leaderOnly bool) (*fakeLog, error) {
	lc := h.lc
	lc.reqs[logReqKey{h.m, transport.LogName(field), op}]++
	lc.pokeLocked()
	return h.lookupLocked(field, op, leaderOnly)
}

// lookupLocked is logLocked without counting.
func (h *logsHandler) lookupLocked(field string, op transport.Op, leaderOnly bool) (*fakeLog, error) {
	lc := h.lc
	name := transport.LogName(field)
	l := lc.logs[name]
	if l == nil {
		return nil, transport.NotFoundLog(name)
	}
	if leaderOnly && l.leader != h.m {
		return nil, h.notLeaderLocked(name, op, l)
	}
	return l, nil
}

func (h *logsHandler) Handle(_ context.Context, op transport.Op, req any) (any, error) {
	lc := h.lc
	lc.mu.Lock()
	defer lc.mu.Unlock()
	switch r := req.(type) {
	case *transport.AppendRequest:
		l, err := h.logLocked(r.Log, op, true)
		if err != nil {
			return nil, err
		}
		return h.appendLocked(l, r)
	case *transport.ReadRequest:
		l, err := h.logLocked(r.Log, op, !r.Stale)
		if err != nil {
			return nil, err
		}
		i := max(r.From, 1) - 1
		if i >= uint64(len(l.records)) {
			return &transport.ReadResponse{Next: i + 1}, nil
		}
		recs := slices.Clone(l.records[i:min(uint64(len(l.records)), i+uint64(r.MaxRecords))])
		return &transport.ReadResponse{Records: recs, Next: recs[len(recs)-1].Index + 1}, nil
	case *transport.TrimRequest:
		if _, err := h.logLocked(r.Log, op, true); err != nil {
			return nil, err
		}
		return &transport.TrimResponse{Index: 1000}, nil
	case *transport.StatusRequest:
		return &transport.StatusResponse{NodeID: "n" + strconv.Itoa(h.m), Role: "Follower"}, nil
	case *transport.RestoreLogRequest:
		l, err := h.logLocked(r.Log, op, true)
		if err != nil {
			return nil, err
		}
		if l.restoreHook != nil {
			if err := l.restoreHook(h.m, r); err != nil {
				return nil, err
			}
			if l.leader != h.m {
				return nil, h.notLeaderLocked(r.Log, op, l)
			}
		}
		switch {
		case r.Offset == 0:
			l.upload, l.uploadOn = nil, h.m
		case l.uploadOn != h.m || uint64(len(l.upload)) != r.Offset:
			return nil, &transport.Error{Code: transport.CodeFailedPrecondition, Message: "no such upload"}
		}
		l.upload = append(l.upload, r.Data...)
		resp := &transport.RestoreLogResponse{Received: uint64(len(l.upload))}
		if r.Done {
			l.restored = slices.Clone(l.upload)
			resp.BackupIndex, resp.Index, resp.Replicas = 99, 100, uint32(len(l.members))
		}
		return resp, nil
	case *transport.CreateLogRequest, *transport.DeleteLogRequest:
		lc.reqs[logReqKey{h.m, "", op}]++
		lc.pokeLocked()
		if lc.catalog != h.m {
			lc.refused[logReqKey{h.m, "", op}]++
			return nil, &transport.Error{Code: transport.CodeNotLeader, LeaderID: "n" + strconv.Itoa(lc.catalog), LeaderAddr: lc.addrs[lc.catalog]}
		}
		if r, ok := r.(*transport.CreateLogRequest); ok {
			if lc.logs[r.Name] != nil {
				return nil, transport.DuplicateLog(r.Name)
			}
			l := newFakeLog(lc.nextID, -1, []int{0})
			lc.nextID++
			lc.logs[r.Name] = l
			return &transport.CreateLogResponse{Log: h.infoLocked(r.Name, l)}, nil
		}
		name := r.(*transport.DeleteLogRequest).Name
		l := lc.logs[name]
		if l == nil {
			return nil, transport.NotFoundLog(name)
		}
		delete(lc.logs, name)
		info := h.infoLocked(name, l)
		info.State = transport.LogDeleting
		return &transport.DeleteLogResponse{Log: info}, nil
	case *transport.ListLogsRequest:
		lc.reqs[logReqKey{h.m, "", op}]++
		var resp transport.ListLogsResponse
		for name, l := range lc.logs {
			resp.Logs = append(resp.Logs, h.infoLocked(name, l))
		}
		slices.SortFunc(resp.Logs, func(a, b transport.LogInfo) int { return cmpString(a.Name, b.Name) })
		return &resp, nil
	case *transport.DescribeLogRequest:
		l, err := h.logLocked(r.Name, op, true)
		if err != nil {
			return nil, err
		}
		resp := &transport.DescribeLogResponse{Log: h.infoLocked(transport.LogName(r.Name), l), LeaderAddr: lc.addrs[l.leader], LastIndex: uint64(len(l.records))}
		for _, m := range l.members {
			role := transport.RoleFollower
			if m == l.leader {
				role = transport.RoleLeader
			}
			resp.Members = append(resp.Members, transport.LogMember{NodeID: "n" + strconv.Itoa(m), ClientAddr: lc.addrs[m], Role: role, CaughtUp: true})
		}
		return resp, nil
	}
	return nil, &transport.Error{Code: transport.CodeUnknownOp}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (h *logsHandler) infoLocked(name string, l *fakeLog) transport.LogInfo {
	info := transport.LogInfo{Name: name, ID: l.id, Replicas: uint32(len(l.members)), State: transport.LogActive}
	for _, m := range l.members {
		info.Members = append(info.Members, "n"+strconv.Itoa(m))
	}
	return info
}

// appendLocked stores an append to l once per (ClientID, Seq).
func (h *logsHandler) appendLocked(l *fakeLog, r *transport.AppendRequest) (any, error) {
	s := l.sessions[r.ClientID]
	if s == nil {
		s = &fakeSession{done: map[uint64][]uint64{}}
		l.sessions[r.ClientID] = s
	}
	if idx, ok := s.done[r.Seq]; ok {
		return &transport.AppendResponse{Indexes: idx, Duplicate: true}, nil
	}
	var idx []uint64
	for _, rec := range r.Records {
		i := uint64(len(l.records)) + 1
		l.records = append(l.records, transport.Record{Index: i, Data: rec})
		idx = append(idx, i)
	}
	s.done[r.Seq] = idx
	l.seqs[r.ClientID] = append(l.seqs[r.ClientID], r.Seq)
	l.bases[r.ClientID] = append(l.bases[r.ClientID], r.Base)
	if l.drop > 0 {
		if l.drop--; l.drop == 0 {
			h.nc.Close() // stored; the reply is lost
			return nil, errors.New("connection dropped")
		}
	}
	return &transport.AppendResponse{Indexes: idx}, nil
}

func (h *logsHandler) Stream(ctx context.Context, op transport.Op, req any, s *transport.ServerStream) error {
	lc := h.lc
	r := req.(*transport.TailRequest)
	from := max(r.From, 1)
	lc.mu.Lock()
	lc.reqs[logReqKey{h.m, transport.LogName(r.Log), op}]++
	lc.pokeLocked()
	lc.mu.Unlock()
	for {
		lc.mu.Lock()
		l, err := h.lookupLocked(r.Log, op, !r.Stale)
		if err != nil {
			lc.mu.Unlock()
			return err
		}
		var recs []transport.Record
		if from <= uint64(len(l.records)) {
			recs = slices.Clone(l.records[from-1:])
		}
		poke := lc.poke
		lc.mu.Unlock()
		if err := tailStep(ctx, s, recs, &from, poke); err != nil {
			return err
		}
	}
}
