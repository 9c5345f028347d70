package schedule

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"time"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// recordPrefix starts the state keys of schedule records on the scheduler's
// queue; the key is the prefix and the name, which ValidateName keeps to
// one token.
const recordPrefix = "schedule."

// maxSkipRanges bounds the skipped ranges a record keeps for Backfill.
const maxSkipRanges = 64

// record is what the queue stores for a schedule, as JSON.
type record struct {
	V       int           `json:"v"`
	Name    string        `json:"name"`
	Spec    Spec          `json:"spec"`
	Queue   string        `json:"queue,omitempty"`
	Topic   string        `json:"topic,omitempty"`
	Message storedMsg     `json:"message"`
	Start   time.Time     `json:"start"`
	End     time.Time     `json:"end,omitzero"`
	CatchUp CatchUp       `json:"catch_up,omitzero"`
	Jitter  time.Duration `json:"jitter,omitempty"`
	Note    string        `json:"note,omitempty"`
	Created time.Time     `json:"created"`

	Next      time.Time `json:"next,omitzero"`
	FireAt    time.Time `json:"fire_at,omitzero"`
	TickID    string    `json:"tick_id,omitempty"`
	TickSeq   uint64    `json:"tick_seq,omitempty"`
	TickRef   string    `json:"tick_ref,omitempty"` // the tick's ref on the engine given WithTimeouts
	Gen       uint64    `json:"gen,omitempty"`      // incremented by every write (commit)
	First     time.Time `json:"first,omitzero"`     // first occurrence sent or skipped
	Last      time.Time `json:"last,omitzero"`
	Paused    bool      `json:"paused,omitempty"`
	PausedAt  time.Time `json:"paused_at,omitzero"`
	PauseNote string    `json:"pause_note,omitempty"`
	Ended     bool      `json:"ended,omitempty"`
	Sent      int64     `json:"sent,omitempty"`
	Skipped   int64     `json:"skipped,omitempty"`
	Late      int64     `json:"late,omitempty"`
	// Plan is the occurrences planned ahead, from Next on, in order: each
	// a message scheduled on the target for its time (see plan.go).
	Plan []planned `json:"plan,omitempty"`
	// Withdrawn are the latest occurrences whose planned messages were
	// cancelled, each with the last ID cancelled: the target keeps that
	// ID taken, so the occurrence is sent again under the next one.
	Withdrawn []planned `json:"withdrawn,omitempty"`
	// Wake is when the record's tick is due (its planning time).
	Wake time.Time `json:"wake,omitzero"`
	// Skips are the latest ranges of nominal times skipped (by a pause or
	// the catch-up policy), inclusive, oldest first.
	Skips [][2]time.Time `json:"skips,omitempty"`

	// retry, when set, has this write keep Wake as it is (not stored):
	// a tick that failed is tried again then.
	retry bool
	// guarded, when set, says the writer holds a tick of the schedule
	// (not stored): see commitGuarded.
	guarded bool
	// guardTick, when set, marks this write's tick as a guard, replaced at
	// once (not stored): it stays on the queue, not on a timeout engine.
	guardTick bool
}

type storedMsg struct {
	Body          []byte            `json:"body,omitempty"`
	ContentType   string            `json:"content_type,omitempty"`
	CorrelationID string            `json:"correlation_id,omitempty"`
	SessionID     string            `json:"session_id,omitempty"`
	ReplyTo       string            `json:"reply_to,omitempty"`
	Subject       string            `json:"subject,omitempty"`
	Properties    map[string]string `json:"properties,omitempty"`
}

func storeMsg(m *transport.Message) storedMsg {
	return storedMsg{Body: m.Body, ContentType: m.ContentType, CorrelationID: m.CorrelationID,
		SessionID: m.SessionID, ReplyTo: m.ReplyTo, Subject: m.Subject, Properties: maps.Clone(m.Properties)}
}

func (s storedMsg) message() *transport.Message {
	return &transport.Message{Body: s.Body, ContentType: s.ContentType, CorrelationID: s.CorrelationID,
		SessionID: s.SessionID, ReplyTo: s.ReplyTo, Subject: s.Subject, Properties: maps.Clone(s.Properties)}
}

func decodeRecord(b []byte) (*record, error) {
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("schedule: bad record: %w", err)
	}
	return &r, nil
}

func (r *record) info() Info {
	next := r.Next
	if r.Paused {
		// The record keeps the occurrence that was pending (Resume counts
		// the pause's skips from it); a paused schedule has none.
		next = time.Time{}
	}
	return Info{
		Schedule: Schedule{Name: r.Name, Spec: r.Spec, Action: Action{Queue: r.Queue, Topic: r.Topic, Message: r.Message.message()},
			Start: r.Start, End: r.End, CatchUp: r.CatchUp, Jitter: r.Jitter, Note: r.Note},
		Created: r.Created, Next: next, FireAt: r.FireAt, Last: r.Last,
		Paused: r.Paused, PausedAt: r.PausedAt, PauseNote: r.PauseNote, Ended: r.Ended,
		Sent: r.Sent, Skipped: r.Skipped, Late: r.Late, Engine: r.engine(),
	}
}

// engine names where the pending occurrence's tick is: the engine of its
// ref, or timeout.QueueEngine for one on the scheduler's queue.
func (r *record) engine() string {
	switch {
	case r.TickRef != "":
		return timeout.Ref(r.TickRef).Engine()
	case r.TickID != "":
		return timeout.QueueEngine
	}
	return ""
}

// jitter returns the delay of the occurrence id: fixed by the ID, in [0, max).
func jitter(id string, max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	return time.Duration(h.Sum64() % uint64(max))
}

// skipOne records the occurrence at t as skipped; call it before handled(t).
func (r *record) skipOne(t time.Time) {
	r.Skipped++
	if k := len(r.Skips); k > 0 && !r.Last.IsZero() && r.Skips[k-1][1].Equal(r.Last) {
		r.Skips[k-1][1] = t // contiguous with the range before: extend it
		return
	}
	r.Skips = append(r.Skips, [2]time.Time{t, t})
	if len(r.Skips) > maxSkipRanges {
		r.Skips = r.Skips[len(r.Skips)-maxSkipRanges:]
	}
}

// handled notes that the occurrence at t was sent or skipped.
func (r *record) handled(t time.Time) {
	if r.First.IsZero() {
		r.First = t
	}
	r.Last = t
}

// sentBySchedule reports whether the schedule itself sent (or, by its
// catch-up policy or a pause, skipped on purpose) the occurrence at t, as far
// as the record tells: Backfill leaves those out, except skipped ones.
func (r *record) sentBySchedule(t time.Time) bool {
	if r.First.IsZero() || t.Before(r.First) || t.After(r.Last) {
		return false
	}
	for _, s := range r.Skips {
		if !t.Before(s[0]) && !t.After(s[1]) {
			return false
		}
	}
	if len(r.Skips) == maxSkipRanges && t.Before(r.Skips[0][0]) {
		return false // older skips may have been forgotten
	}
	return true
}
