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

// current returns the member that requests go to unless they name one.
func (c *Client) current() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.target
}

// follow moves requests to leader, which a member named as the leader.
func (c *Client) follow(leader string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.learnLocked(leader)
	c.target = leader
	c.leader = leader
}

// advance moves requests from the member at from, which failed, to the
// next known member, unless another request has moved them already.
func (c *Client) advance(from string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leader == from {
		c.leader = ""
	}
	if c.target != from {
		return
	}
	next := c.addrs[0]
	for i, a := range c.addrs {
		if a == from {
			next = c.addrs[(i+1)%len(c.addrs)]
			break
		}
	}
	c.target = next
}

// confirm records that the member at addr served a request that only the
// leader serves.
func (c *Client) confirm(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.target == addr {
		c.leader = addr
	}
}

// forgetLeader records that the leader is no longer known.
func (c *Client) forgetLeader() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leader = ""
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
