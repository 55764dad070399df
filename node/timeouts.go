package node

import (
	"errors"
	"fmt"
	"time"
)

// Raft's timeouts. The defaults hold on a busy 2-core host: measured on
// this project's machine with an idle 3-node cluster beside a CPU load
// (see README, "Raft timeouts"), the former defaults of 400, 400 and
// 250 ms elected new leaders by themselves, the leader's lease being the
// first to lapse when the process was not scheduled for a quarter second.
// The price is failover time: a follower notices a dead leader after
// HeartbeatTimeout to twice that, and then needs an election.
const (
	// DefaultHeartbeatTimeout is Config.HeartbeatTimeout's default.
	DefaultHeartbeatTimeout = 700 * time.Millisecond
	// DefaultElectionTimeout is Config.ElectionTimeout's default.
	DefaultElectionTimeout = 700 * time.Millisecond
	// DefaultLeaderLeaseTimeout is Config.LeaderLeaseTimeout's default:
	// as long as raft allows (the heartbeat timeout), since the lease is
	// what a starved leader loses first. Reads do not rely on it: they
	// confirm the leadership with a quorum.
	DefaultLeaderLeaseTimeout = 700 * time.Millisecond
	// MinRaftTimeout is the least of each raft timeout (hashicorp/raft's
	// own floor is 5 ms; below some tens of milliseconds a loaded Go
	// process misses them all the time).
	MinRaftTimeout = 10 * time.Millisecond
)

// ErrBadTimeouts reports raft timeouts that do not fit together.
var ErrBadTimeouts = errors.New("node: raft timeouts do not fit together")

// raftTimeouts fills in the default raft timeouts and checks how they fit
// together, as hashicorp/raft would at start, but naming the settings.
func (c *Config) raftTimeouts() error {
	if c.HeartbeatTimeout < 0 || c.ElectionTimeout < 0 || c.LeaderLeaseTimeout < 0 {
		return fmt.Errorf("%w: negative timeout (heartbeat %v, election %v, leader lease %v)",
			ErrBadTimeouts, c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout)
	}
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = max(DefaultElectionTimeout, c.HeartbeatTimeout)
	}
	if c.LeaderLeaseTimeout == 0 {
		c.LeaderLeaseTimeout = min(DefaultLeaderLeaseTimeout, c.HeartbeatTimeout)
	}
	for _, t := range []struct {
		name string
		d    time.Duration
	}{{"heartbeat", c.HeartbeatTimeout}, {"election", c.ElectionTimeout}, {"leader lease", c.LeaderLeaseTimeout}} {
		if t.d < MinRaftTimeout {
			return fmt.Errorf("%w: %s timeout %v is below %v", ErrBadTimeouts, t.name, t.d, MinRaftTimeout)
		}
	}
	switch {
	case c.LeaderLeaseTimeout > c.HeartbeatTimeout:
		return fmt.Errorf("%w: leader lease timeout %v is longer than the heartbeat timeout %v: a leader cut off from the others "+
			"would keep its lease after the followers elected another", ErrBadTimeouts, c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	case c.ElectionTimeout < c.HeartbeatTimeout:
		return fmt.Errorf("%w: election timeout %v is shorter than the heartbeat timeout %v", ErrBadTimeouts, c.ElectionTimeout, c.HeartbeatTimeout)
	}
	return nil
}

// CheckRaftTimeouts reports whether c's raft timeouts, zero ones
// defaulted, fit together; the error wraps ErrBadTimeouts and names the
// settings.
func (c Config) CheckRaftTimeouts() error { return c.raftTimeouts() }
