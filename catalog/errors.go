package catalog

import "errors"

// Errors. Every error the package returns wraps one of these with the
// name, id or node it concerns, so errors.Is works and the message names
// the cause. The node maps them to client error codes; the suggested
// mapping is in the comment of each.
var (
	// ErrInvalidName reports a log name that breaks the naming rule (see
	// ValidateName); the message gives the reason. Client code: BadRequest.
	ErrInvalidName = errors.New("catalog: invalid log name")
	// ErrInvalidSettings reports settings out of range: replicas other than
	// 1, 3 or 5, a negative retention, or a change of replicas by
	// UpdateSettings. Client code: BadRequest.
	ErrInvalidSettings = errors.New("catalog: invalid log settings")
	// ErrInvalidMembers reports a replica set that is not the log's
	// replica count of distinct active nodes, or a move that does not fit
	// the log's members. Client code: FailedPrecondition.
	ErrInvalidMembers = errors.New("catalog: invalid members")
	// ErrInvalidNode reports a node id or address that is empty or too
	// long. Client code: BadRequest.
	ErrInvalidNode = errors.New("catalog: invalid node")
	// ErrInvalidClusterID reports a cluster id that is not 32 hex digits
	// (ParseClusterID), or the zero id, which is no cluster's (given to
	// ParseClusterID or SetClusterID). None of the other invalid-argument
	// errors fits: a cluster id is neither a log's nor a node's. Client
	// code: BadRequest.
	ErrInvalidClusterID = errors.New("catalog: invalid cluster id")
	// ErrExists reports a create of a log whose name is taken (by a live
	// log or one still being deleted), a second start of the catalog, or a
	// cluster id given to a catalog that has another. Client code:
	// FailedPrecondition.
	ErrExists = errors.New("catalog: already exists")
	// ErrNotFound reports a log or node the catalog does not hold. Client
	// code: NotFound.
	ErrNotFound = errors.New("catalog: not found")
	// ErrReserved reports an attempt to delete the default log. Client
	// code: FailedPrecondition.
	ErrReserved = errors.New("catalog: reserved")
	// ErrInUse reports a forget of a node that still holds a replica of a
	// log (a member, an initial member or the target of a move). Client
	// code: FailedPrecondition.
	ErrInUse = errors.New("catalog: node in use")
	// ErrDeleting reports a change to a log that is being deleted. Client
	// code: NotFound for record operations, FailedPrecondition for
	// management ones.
	ErrDeleting = errors.New("catalog: log is being deleted")
	// ErrConflict reports a command that no longer fits the log: its
	// version is not the one the proposer read, a move is already under
	// way, or there is no move to finish. The proposer re-reads the
	// catalog and decides again. Client code: FailedPrecondition.
	ErrConflict = errors.New("catalog: conflict")
	// ErrTooFewNodes reports a placement that needs more active nodes than
	// the cluster has. Client code: FailedPrecondition.
	ErrTooFewNodes = errors.New("catalog: too few active nodes")
	// ErrMalformed reports a command or snapshot whose bytes do not decode:
	// truncated, trailing bytes, a length past the end, a value out of
	// range. Commands are written by nodes only, so it means a bug or
	// damage.
	ErrMalformed = errors.New("catalog: malformed encoding")
	// ErrUnsupported reports a command or snapshot of a format version or
	// command kind this code does not know: it was written by a newer node.
	ErrUnsupported = errors.New("catalog: unsupported format")
	// ErrCorrupt reports a snapshot whose checksum or length does not match.
	ErrCorrupt = errors.New("catalog: corrupt snapshot")
)
