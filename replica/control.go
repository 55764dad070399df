package replica

// Control commands: a state machine that a log carries besides its
// records. The node's catalog of named logs rides on the default log this
// way: its commands are entries of the log, so they are ordered, durable
// and replicated as the log's records are, and its state is part of the
// log's snapshots (and backups).

import "fmt"

// kindControl is the command kind of a control command (command.go).
const kindControl byte = 6

// Control is the state machine of a log's control commands. Raft applies
// to it on the FSM's goroutine, under the FSM's lock: its methods must not
// block, and must not call back into the FSM.
type Control interface {
	// ApplyControl applies the command data, the entry at index, and
	// returns what the proposer's future gets as its response.
	ApplyControl(index uint64, data []byte) any
	// ControlState returns the state, encoded; nil or empty while it is
	// the initial state, so that a log that never carried a control
	// command keeps the state format older versions read.
	ControlState() []byte
	// RestoreControl replaces the state by an encoded one; empty means
	// the initial state.
	RestoreControl(state []byte) error
}

// EncodeControlCmd encodes a control command carrying data.
func EncodeControlCmd(data []byte) []byte {
	return append([]byte{kindControl}, data...)
}

// SetControl gives the FSM its control state machine. Call it before raft
// starts; a log without one refuses control commands.
func (f *FSM) SetControl(c Control) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.control = c
}

// applyControl applies a control entry. Called with f.mu held.
func (f *FSM) applyControl(index uint64, data []byte) any {
	if f.control == nil {
		return fmt.Errorf("%w: a control command at index %d, on a log that carries none", errBadCommand, index)
	}
	return f.control.ApplyControl(index, data[1:])
}

// controlStateLocked returns the encoded control state: the control's, or
// without a control the one the FSM was restored with, kept as it is.
// Called with f.mu held.
func (f *FSM) controlStateLocked() []byte {
	if f.control != nil {
		return f.control.ControlState()
	}
	return f.controlBlob
}

// restoreControlLocked restores the control state decoded from a
// snapshot. Called with f.mu held.
func (f *FSM) restoreControlLocked(state []byte) error {
	if f.control != nil {
		return f.control.RestoreControl(state)
	}
	f.controlBlob = state
	return nil
}
