package catalog

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// ClusterID identifies a cluster: 16 random bytes, chosen once when the
// cluster is created (NewClusterID) and held by its catalog (SetClusterID,
// State.ClusterID). A node refuses raft traffic from a node of another
// cluster by comparing ids, so that a stale address in one cluster's
// configuration that now reaches a node of another cannot make that node
// step down and take the first cluster's log.
//
// The zero ClusterID means "no id": a catalog that has not been given one.
// It is never a cluster's id. Wire format (commands and snapshots): the 16
// bytes as they are.
type ClusterID [16]byte

// clusterIDLen is the length of a ClusterID's text form: two hex digits a
// byte.
const clusterIDLen = 2 * len(ClusterID{})

// IsZero reports whether id is the zero id, which no cluster has.
func (id ClusterID) IsZero() bool { return id == ClusterID{} }

// String returns id as 32 lowercase hex digits, the form ParseClusterID
// reads. The zero id, which is no cluster's, returns "": a log line or a
// status field of a catalog without an id shows nothing rather than 32
// zeros that would read as an id.
func (id ClusterID) String() string {
	if id.IsZero() {
		return ""
	}
	return hex.EncodeToString(id[:])
}

// ParseClusterID parses the text form of a cluster id: exactly 32 hex
// digits (String writes them lowercase; uppercase is read too), with no
// spaces, prefix or dashes. The zero id is refused: it is no cluster's.
// The error wraps ErrInvalidClusterID and says what is wrong.
func ParseClusterID(s string) (ClusterID, error) {
	var id ClusterID
	switch {
	case s == "":
		return id, fmt.Errorf("%w: empty", ErrInvalidClusterID)
	case len(s) != clusterIDLen:
		return id, fmt.Errorf("%w: %q is %d bytes long, a cluster id is %d hex digits", ErrInvalidClusterID, truncate(s), len(s), clusterIDLen)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return id, fmt.Errorf("%w: %q has %q at byte %d; a cluster id is %d hex digits (0-9, a-f)", ErrInvalidClusterID, s, c, i, clusterIDLen)
		}
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		// Unreachable: every byte was checked above.
		return ClusterID{}, fmt.Errorf("%w: %q: %v", ErrInvalidClusterID, s, err)
	}
	if id.IsZero() {
		return id, fmt.Errorf("%w: %q is the zero id, which is no cluster's", ErrInvalidClusterID, s)
	}
	return id, nil
}

// NewClusterID returns a new cluster id of 16 bytes from crypto/rand,
// never the zero id. Its error is crypto/rand's (which current Go never
// returns).
func NewClusterID() (ClusterID, error) {
	var id ClusterID
	for id.IsZero() { // a zero draw has odds of 2^-128, but is no id
		if _, err := rand.Read(id[:]); err != nil {
			return ClusterID{}, fmt.Errorf("catalog: new cluster id: %w", err)
		}
	}
	return id, nil
}
