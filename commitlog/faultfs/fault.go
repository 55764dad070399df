package faultfs

import (
	"fmt"
	"strings"
	"syscall"
)

// Op names an operation that a Fault makes fail.
type Op int

// The operations a Fault can target.
const (
	// OpRead is File.ReadAt.
	OpRead Op = iota + 1
	// OpWrite is File.WriteAt.
	OpWrite
	// OpSync is File.Sync.
	OpSync
	// OpMsync is Mapping.Sync of a non-empty range.
	OpMsync
	// OpAllocate is File.Allocate.
	OpAllocate
	// OpTruncate is File.Truncate.
	OpTruncate
	// OpMap is File.Map.
	OpMap
	// OpOpen is every FS.OpenFile call.
	OpOpen
	// OpCreate is an FS.OpenFile or FS.Lock call that would create the
	// file.
	OpCreate
	// OpRemove is FS.Remove.
	OpRemove
	// OpRename is FS.Rename; a Fault's Path matches either name.
	OpRename
	// OpMkdirAll is FS.MkdirAll.
	OpMkdirAll
	// OpReadDir is FS.ReadDir.
	OpReadDir
	// OpSyncDir is FS.SyncDir.
	OpSyncDir
	// OpLock is FS.Lock.
	OpLock
)

var opNames = [...]string{
	OpRead:     "read",
	OpWrite:    "write",
	OpSync:     "sync",
	OpMsync:    "msync",
	OpAllocate: "allocate",
	OpTruncate: "truncate",
	OpMap:      "map",
	OpOpen:     "open",
	OpCreate:   "create",
	OpRemove:   "remove",
	OpRename:   "rename",
	OpMkdirAll: "mkdirall",
	OpReadDir:  "readdir",
	OpSyncDir:  "syncdir",
	OpLock:     "lock",
}

// String returns the operation's name.
func (o Op) String() string {
	if o > 0 && int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Fault makes calls of one operation fail.
type Fault struct {
	// Op is the operation to fail.
	Op Op
	// Path, if not empty, restricts the fault to calls whose path (the
	// name the file was opened with, or the name or directory passed to
	// the FS) contains it.
	Path string
	// After is the number of matching calls that succeed before the fault
	// fires.
	After int
	// Err is the error the failing call returns, wrapped in an
	// *os.PathError or *os.LinkError. nil means syscall.EIO.
	Err error
	// Sticky makes the fault fire on every matching call after the first
	// After; otherwise it fires once and is spent.
	Sticky bool
}

// NoSpace returns the faults of a full disk as node's fault injection
// makes one (POST /fault/nospace, node/fault.go): from now on, creating a
// file whose path contains path (every file when it is empty) and
// Allocate of such a file fail with an error wrapping syscall.ENOSPC, on
// every call, until ClearFaults. Writes within a file's length, syncs,
// renames and removals go on working. Inject each of them:
//
//	for _, f := range faultfs.NoSpace(dir) {
//		fs.Inject(f)
//	}
//
// SetCapacity is the other model of a full disk: every growth of a file
// fails, creating an empty one does not.
func NoSpace(path string) []Fault {
	return []Fault{
		{Op: OpCreate, Path: path, Err: syscall.ENOSPC, Sticky: true},
		{Op: OpAllocate, Path: path, Err: syscall.ENOSPC, Sticky: true},
	}
}

// fault is an injected Fault and its state, guarded by FS.mu.
type fault struct {
	Fault
	// seen counts matching calls so far.
	seen int
	// spent is set once a non-sticky fault has fired.
	spent bool
}

func (f *fault) matches(op Op, paths []string) bool {
	if f.spent || f.Op != op {
		return false
	}
	if f.Path == "" {
		return true
	}
	for _, p := range paths {
		if strings.Contains(p, f.Path) {
			return true
		}
	}
	return false
}

// Inject adds a fault. Faults are independent: each counts its own matching
// calls, and when several are due on one call the earliest injected fires
// and the others stay due for the next matching call. A failed call changes
// nothing.
func (fs *FS) Inject(f Fault) {
	if f.Err == nil {
		f.Err = syscall.EIO
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.faults = append(fs.faults, &fault{Fault: f})
}

// ClearFaults removes every injected fault. It does not change the
// capacity.
func (fs *FS) ClearFaults() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.faults = nil
}

// fault counts a call of op on paths against every injected fault and
// returns the error of the first one due, or nil. mu must be held.
func (fs *FS) fault(op Op, paths ...string) error {
	var err error
	for _, f := range fs.faults {
		if !f.matches(op, paths) {
			continue
		}
		f.seen++
		if f.seen <= f.After || err != nil {
			continue
		}
		err = f.Err
		if !f.Sticky {
			f.spent = true
		}
	}
	return err
}
