package replica

import "fmt"

// Groups are the raftstore groups of a node's DB that hold one log: raft's
// log and stable state, and the two archive groups that take turns
// holding the retained entries below raft's log (logview.go,
// snapinstall.go). A replica that never installed a snapshot uses
// ArchiveA.
type Groups struct {
	Live, ArchiveA, ArchiveB uint64
}

// MaxLogID is the largest log id GroupsOf accepts.
const MaxLogID = 1<<62 - 1

// GroupsOf returns the groups of the log with the given id: 4·id+1, +2
// and +3. The default log, id 0, has groups 1, 2 and 3 (what a node of
// the versions before named logs used); groups 4·id, 0 among them, are
// left to the node. It panics on an id above MaxLogID.
func GroupsOf(id uint64) Groups {
	if id > MaxLogID {
		panic(fmt.Sprintf("replica: log id %d above %d", id, uint64(MaxLogID)))
	}
	b := 4 * id
	return Groups{Live: b + 1, ArchiveA: b + 2, ArchiveB: b + 3}
}

// isArchive reports whether g is one of the two archive groups.
func (gs Groups) isArchive(g uint64) bool { return g == gs.ArchiveA || g == gs.ArchiveB }

// otherArchive returns the archive group that is not g.
func (gs Groups) otherArchive(g uint64) uint64 {
	if g == gs.ArchiveA {
		return gs.ArchiveB
	}
	return gs.ArchiveA
}
