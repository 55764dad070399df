package replica

import "sync"

// pinSet holds the pins of the backups in progress.
type pinSet struct {
	mu   sync.Mutex
	pins map[*LogPin]struct{} // guarded by mu
}

// LogPin keeps the entries at or above its index from deletion.
type LogPin struct {
	set *pinSet
	at  uint64 // guarded by set.mu
}

// add returns a pin at index at.
func (s *pinSet) add(at uint64) *LogPin {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pins == nil {
		s.pins = map[*LogPin]struct{}{}
	}
	p := &LogPin{set: s, at: at}
	s.pins[p] = struct{}{}
	return p
}

// lowest returns the lowest pin, and false when there is none.
func (s *pinSet) lowest() (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var low uint64
	found := false
	for p := range s.pins {
		if !found || p.at < low {
			low, found = p.at, true
		}
	}
	return low, found
}

// Raise moves the pin up to index at: the entries below it may go.
func (p *LogPin) Raise(at uint64) {
	p.set.mu.Lock()
	defer p.set.mu.Unlock()
	p.at = max(p.at, at)
}

// drop removes the pin.
func (p *LogPin) drop() {
	p.set.mu.Lock()
	defer p.set.mu.Unlock()
	delete(p.set.pins, p)
}

// Hold pins every entry the node holds now. Taken under mu, so that no
// deletion runs between reading the lowest index and pinning it.
func (s *SnapStore) Hold() *LogPin {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.view.pins.add(s.view.First())
}

// Release drops pin and deletes the entries it kept that the newest
// snapshot's floor no longer retains.
func (s *SnapStore) Release(pin *LogPin) {
	pin.drop()
	s.mu.Lock()
	defer s.mu.Unlock()
	files, err := s.Files()
	if err != nil || len(files) == 0 {
		return // the next snapshot deletes them
	}
	if err := s.view.DeleteBelow(files[0].Floor, files[0].Meta.Index); err != nil {
		s.logger.Warn("deleting the trimmed entries a backup kept; the next snapshot does it", "error", err)
	}
}
