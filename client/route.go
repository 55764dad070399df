package client

// maxKnownAddrs bounds the member addresses a Client remembers, so that
// replies naming ever new leaders cannot grow the list without end.
const maxKnownAddrs = 64

// route says which members an operation may go to.
type route int

const (
	// toLeader: the member believed to lead; NotLeader replies move it.
	toLeader route = iota
	// toAny: any member, the current one first, the next known one after a
	// failure (stale reads).
	toAny
	// toMember: one given member only; never moves.
	toMember
)

// leaderRoute is where the requests of one raft group go: a log's, or the
// catalog's (CreateLog, DeleteLog). Every log has its own, so a NotLeader
// reply or a failed member moves the requests of that log only.
type leaderRoute struct {
	// Guarded by Client.mu:
	target string // member that requests go to unless they name one
	leader string // member believed to lead; "" if unknown
}

// current returns the member that requests of lr go to unless they name
// one.
func (c *Client) current(lr *leaderRoute) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return lr.target
}

// follow moves the requests of lr to leader, which a member named as
// their leader.
func (c *Client) follow(lr *leaderRoute, leader string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.learnLocked(leader)
	lr.target = leader
	lr.leader = leader
}

// hint moves the requests of lr to member, which a member named as one
// that holds their log (its leader unknown): it may know the leader.
func (c *Client) hint(lr *leaderRoute, member string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.learnLocked(member)
	lr.target = member
	if lr.leader != member {
		lr.leader = ""
	}
}

// advance moves the requests of lr from the member at from, which failed,
// to the next known member that skip, when not nil, does not pass over
// (the next one if it passes over all), unless another request has moved
// them already.
func (c *Client) advance(lr *leaderRoute, from string, skip func(string) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if lr.leader == from {
		lr.leader = ""
	}
	if lr.target != from {
		return
	}
	start := 0
	for i, a := range c.addrs {
		if a == from {
			start = i + 1
			break
		}
	}
	next := c.addrs[start%len(c.addrs)]
	for k := range len(c.addrs) {
		if a := c.addrs[(start+k)%len(c.addrs)]; a != from && (skip == nil || !skip(a)) {
			next = a
			break
		}
	}
	lr.target = next
}

// confirm records that the member at addr served a request of lr that only
// the leader serves.
func (c *Client) confirm(lr *leaderRoute, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if lr.target == addr {
		lr.leader = addr
	}
}

// forgetLeader records that the leader of lr is no longer known.
func (c *Client) forgetLeader(lr *leaderRoute) {
	c.mu.Lock()
	defer c.mu.Unlock()
	lr.leader = ""
}

// leaderOf returns the member believed to lead lr, "" if unknown.
func (c *Client) leaderOf(lr *leaderRoute) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return lr.leader
}

// learn remembers the member address addr.
func (c *Client) learn(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.learnLocked(addr)
}

func (c *Client) learnLocked(addr string) {
	for _, a := range c.addrs {
		if a == addr {
			return
		}
	}
	if len(c.addrs) < maxKnownAddrs {
		c.addrs = append(c.addrs, addr)
	}
}

// allKnownIn reports whether every known member address is in set.
func (c *Client) allKnownIn(set map[string]bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.addrs {
		if !set[a] {
			return false
		}
	}
	return true
}
