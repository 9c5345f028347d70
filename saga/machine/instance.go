package machine

import (
	"time"

	"github.com/jetsaga/jetsaga/saga"
)

// Instance is what a machine keeps in its saga's data: embed it in the
// data type, as the first field by convention.
//
//	type Order struct {
//		machine.Instance
//		Total int
//	}
//
// It is stored with the rest of the data, under the JSON key "machine"
// (with the default codec), so the record carries the instance's current
// state by name: renaming or removing a state is a change of the record's
// meaning, handled like any change of the data (saga.DataVersion with an
// upcaster that renames it). A record whose state the machine no longer
// has is not guessed at: its messages are dead-lettered with
// ErrUnknownState.
type Instance struct {
	Machine Status `json:"machine"`
}

func (i *Instance) machineInstance() *Instance { return i }

type instancer interface{ machineInstance() *Instance }

// CurrentState returns the name of the instance's state: Initial for an
// instance that has not left it.
func (i Instance) CurrentState() string {
	if i.Machine.State == "" {
		return Initial.name
	}
	return i.Machine.State
}

// Status is the machine's part of an instance's data. Handlers read it;
// only the machine changes it.
type Status struct {
	// State is the current state's name; empty for Initial.
	State string `json:"state,omitempty"`
	// Seq numbers the instance's requests.
	Seq uint64 `json:"seq,omitempty"`
	// Schedules holds the handle of each scheduled timeout, by the
	// schedule's name, until it is handled or unscheduled.
	Schedules map[string]saga.TimeoutHandle `json:"schedules,omitempty"`
	// Requests holds the pending request of each request name.
	Requests map[string]Pending `json:"requests,omitempty"`
	// Arrived lists, by composite event, the constituents that have
	// arrived since it was last raised.
	Arrived map[string][]string `json:"arrived,omitempty"`
	// History is the bounded list of the latest transitions, kept with
	// WithHistory (newest last).
	History []Transition `json:"history,omitempty"`
}

// Pending is a request waiting for its response, fault or timeout.
type Pending struct {
	// ID is the request's CorrelationID, which its response carries.
	ID string `json:"id"`
	// Timeout is the handle of the request's timeout.
	Timeout saga.TimeoutHandle `json:"timeout"`
}

// Transition is one change of state, as WithHistory keeps them.
type Transition struct {
	From  string    `json:"from"`
	To    string    `json:"to"`
	Event string    `json:"event"`
	At    time.Time `json:"at"`
}

// Path returns the states the instance went through, as its history
// (WithHistory) tells: the first transition's From, then each To. It is
// empty without a history.
func (i Instance) Path() []string {
	h := i.Machine.History
	if len(h) == 0 {
		return nil
	}
	p := []string{h[0].From}
	for _, t := range h {
		p = append(p, t.To)
	}
	return p
}
