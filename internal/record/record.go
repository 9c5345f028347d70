// Package record is the format of a saga instance's record, what a
// saga.Store holds for it: shared by the saga runtime, which owns its
// meaning, and by the benchmarks, which write records of the same shape
// and size without the runtime.
package record

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/timeout"
)

// Record is what the Store holds for one saga instance: the user's data
// and everything that makes a step all-or-nothing.
//
// A step writes the new data together with the step's effects (Outbox)
// and the incoming message's identity (Inbox) in one conditional Put.
// Only then are the effects carried out, with IDs fixed in the record, so
// that carrying them out again after a crash is deduplicated downstream;
// if the Outbox sends messages, a second Put clears it and records timeout
// refs, else it stays until the next commit (see carryOutInMemory). A
// redelivered message whose identity is in the Inbox has no second
// effect: its Outbox, if still there, is carried out, and it is
// acknowledged.
type Record struct {
	JSONData json.RawMessage `json:"data,omitempty"` // data the codec made JSON, as is
	BinData  []byte          `json:"bin,omitempty"`  // data in any other encoding, base64
	// Version is the version of the saga's data (DataVersion) the data
	// was written with; 0 for version 1, which records written before
	// versions existed are, and which is written without it, so that a
	// version-1 record reads the same to releases before versions.
	Version int `json:"version,omitempty"`

	Timeouts   map[string]Timeout `json:"timeouts,omitempty"`
	Inbox      []string           `json:"inbox,omitempty"`       // the newest InboxRecent entries (see InboxRecent)
	InboxOlder []byte             `json:"inbox_older,omitempty"` // older entries, packed
	InboxTimes []InboxRun         `json:"inbox_times,omitempty"` // when each entry was committed
	Outbox     []Effect           `json:"outbox,omitempty"`
	Originator *Address           `json:"originator,omitempty"`
	Completed  bool               `json:"completed,omitempty"`
	Started    time.Time          `json:"started"`
	Updated    time.Time          `json:"updated"`

	// Expects are the messages the last step expects (Context.Expect):
	// nil for a saga without CheckLiveness, empty if it expects none
	// (omitzero writes an empty list, see saga/liveness.go).
	Expects []string `json:"expects,omitzero"`

	// PartitionKey is the instance's fairness key (saga.PartitionKeyBy):
	// by default the PartitionKey of the message that started it. Every
	// message the instance sends and every timeout it requests carries
	// it, unless the step gives another. Empty for an instance without
	// one, and for records written before the key existed. It is kept
	// here, once, rather than on each Timeout, so that a Timeout stays
	// within 128 bytes.
	PartitionKey string `json:"partition_key,omitempty"`

	// Index holds the instance's values of its saga's indexes (saga.Index)
	// as its last step computed them, by index name: the truth an index
	// entry is checked against on every read. Empty for a saga without
	// indexes and for records written before its indexes existed (until
	// the index is rebuilt).
	Index map[string][]string `json:"index,omitempty"`
	// IndexNew are the values of Index the step that made this record
	// added (those the record it loaded did not hold), whose entries the
	// commit writes before the record: a mark of the step, not content.
	IndexNew map[string][]string `json:"-"`

	// FromCache marks a record the runtime's record cache served, not
	// the store: a mark of this value, not content.
	FromCache bool `json:"-"`
}

// Data returns the instance's encoded data.
func (r *Record) Data() []byte {
	if len(r.JSONData) > 0 {
		return r.JSONData
	}
	return r.BinData
}

// SetData stores encoded data: JSON inline, which saves a base64 pass on
// every step with the default codec; anything else as bytes.
func (r *Record) SetData(b []byte) {
	r.JSONData, r.BinData = nil, nil
	if json.Valid(b) {
		r.JSONData = b
	} else {
		r.BinData = b
	}
}

// DataVersion returns the version of the record's data: 1 if it has none.
func (r *Record) DataVersion() int { return max(r.Version, 1) }

// SetDataVersion records the version data was written with.
func (r *Record) SetDataVersion(v int) {
	r.Version = 0
	if v > 1 {
		r.Version = v
	}
}

// The inbox keeps the identities (digests) of the messages an instance
// committed, for as long as the queue could still deliver one of them
// again, so that a redelivery has no second effect however many other
// messages reach the instance meanwhile. Entries are in commit order,
// oldest first, and stored in three fields:
//
//   - Inbox: the newest InboxRecent digests, as strings: the one inbox
//     field of releases before InboxTimes, which read and keep these
//     (and, writing the record, drop the other two fields, so that they
//     lose no more than the last InboxRecent they always kept);
//   - InboxOlder: the older digests, packed (InboxDigestLen bytes each);
//   - InboxTimes: when the entries were committed, as runs of entries
//     committed within the same second (Unix seconds, rounded up).
//
// Remember forgets entries older than the retention it is given, but
// never the newest InboxRecent, and refuses (ErrInboxFull) to hold more
// than InboxLimit entries younger than the retention.
const (
	// InboxRecent is how many of the newest entries are kept in Inbox,
	// whatever their age: the fixed inbox of earlier releases.
	InboxRecent = 128
	// InboxLimit is the most entries an inbox holds: about 600 KB.
	InboxLimit = 50_000
	// InboxDigestLen is the length of an identity's digest, in bytes.
	InboxDigestLen = 9
)

// ErrInboxFull is returned by Remember when the inbox already holds
// InboxLimit entries younger than the retention.
var ErrInboxFull = errors.New("saga: inbox full: too many messages within the redelivery window of one instance")

// InboxRun is a run of inbox entries committed within the same second.
type InboxRun struct {
	At int64 `json:"t"` // Unix seconds, rounded up: no entry of the run is younger
	N  int   `json:"n"` // entries
}

// InboxDigest is what the inbox keeps of an identity, a 72-bit digest: identities can be
// long (a MessageID of 128 bytes), and the record is encoded twice and
// decoded once a step.
func InboxDigest(id string) string {
	h := inboxDigest(id)
	return base64.RawURLEncoding.EncodeToString(h[:])
}

func inboxDigest(id string) [InboxDigestLen]byte {
	h := sha256.Sum256([]byte(id))
	return [InboxDigestLen]byte(h[:InboxDigestLen])
}

// InboxLen returns how many identities the inbox holds.
func (r *Record) InboxLen() int { return len(r.InboxOlder)/InboxDigestLen + len(r.Inbox) }

// Seen reports whether the inbox holds identity id.
func (r *Record) Seen(id string) bool {
	if slices.Contains(r.Inbox, InboxDigest(id)) {
		return true
	}
	d := inboxDigest(id)
	for b := r.InboxOlder; len(b) >= InboxDigestLen; b = b[InboxDigestLen:] {
		if [InboxDigestLen]byte(b) == d {
			return true
		}
	}
	return false
}

// Remember adds identity id, committed at now, to the inbox, and forgets
// the entries committed more than keep before now, except the newest
// InboxRecent. It returns ErrInboxFull, and changes nothing but the
// forgetting, if InboxLimit entries remain.
func (r *Record) Remember(id string, now time.Time, keep time.Duration) error {
	r.inboxTimes(now)
	r.Forget(now, keep)
	if r.InboxLen() >= InboxLimit {
		return ErrInboxFull
	}
	at := now.Unix()
	if now.After(time.Unix(at, 0)) {
		at++
	}
	if n := len(r.InboxTimes); n > 0 && r.InboxTimes[n-1].At >= at {
		// Never earlier than the entry before (the clocks of two
		// dispatchers differ): kept a little longer, never shorter.
		r.InboxTimes[n-1].N++
	} else {
		r.InboxTimes = append(r.InboxTimes, InboxRun{At: at, N: 1})
	}
	r.Inbox = append(r.Inbox, InboxDigest(id))
	if n := len(r.Inbox) - InboxRecent; n > 0 {
		for _, s := range r.Inbox[:n] {
			r.InboxOlder = append(r.InboxOlder, packDigest(s)...)
		}
		r.Inbox = slices.Delete(r.Inbox, 0, n)
	}
	r.Forget(now, keep) // the newest InboxRecent, with this one
	return nil
}

// Forget drops the entries committed more than keep before now, except
// the newest InboxRecent.
func (r *Record) Forget(now time.Time, keep time.Duration) {
	r.inboxTimes(now)
	for len(r.InboxTimes) > 0 {
		run := &r.InboxTimes[0]
		excess := r.InboxLen() - InboxRecent
		if excess <= 0 || now.Sub(time.Unix(run.At, 0)) <= keep {
			return
		}
		k := min(run.N, excess)
		r.dropOldest(k)
		if run.N -= k; run.N > 0 {
			return
		}
		r.InboxTimes = slices.Delete(r.InboxTimes, 0, 1)
	}
}

// inboxTimes makes InboxTimes account for every entry. Entries of a
// record an earlier release wrote have no times: they count as committed
// now, which keeps them at least as long as they need.
func (r *Record) inboxTimes(now time.Time) {
	total := 0
	for _, run := range r.InboxTimes {
		total += run.N
	}
	if total == r.InboxLen() && len(r.InboxOlder)%InboxDigestLen == 0 {
		return
	}
	r.InboxOlder = r.InboxOlder[:len(r.InboxOlder)/InboxDigestLen*InboxDigestLen]
	r.InboxTimes = nil
	if n := r.InboxLen(); n > 0 {
		r.InboxTimes = []InboxRun{{At: now.Unix() + 1, N: n}}
	}
}

// dropOldest drops the k oldest entries.
func (r *Record) dropOldest(k int) {
	older := len(r.InboxOlder) / InboxDigestLen
	if k <= older {
		r.InboxOlder = slices.Delete(r.InboxOlder, 0, k*InboxDigestLen)
		return
	}
	r.InboxOlder = r.InboxOlder[:0]
	r.Inbox = slices.Delete(r.Inbox, 0, min(k-older, len(r.Inbox)))
}

// packDigest returns the bytes of a digest InboxDigest made. Any other
// string, which no identity's digest matches, becomes bytes no digest
// matches either, except by chance (1 in 2^72).
func packDigest(s string) []byte {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != InboxDigestLen {
		h := sha256.Sum256([]byte("\x00not a digest\x00" + s))
		return h[:InboxDigestLen]
	}
	return b
}

// InboxOnly returns a record that holds r's inbox and nothing else: a
// finished instance, as a new one starts from it.
func (r *Record) InboxOnly() *Record {
	return &Record{Inbox: r.Inbox, InboxOlder: r.InboxOlder, InboxTimes: r.InboxTimes}
}

// Timeout is a pending timeout, keyed in Record.Timeouts by its
// token (the handle). Ref is empty until the timeout has been scheduled.
//
// A timeout requested by a calendar rule (Context.RequestTimeoutBy) also
// keeps the rule, the calendar and the instant the rule counted from, and
// its message, so that it can be planned again under another version of
// the calendar (Dispatcher.ReplanTimeouts). Records written before these
// fields existed load as timeouts requested by an instant.
type Timeout struct {
	Type string      `json:"type"`
	At   time.Time   `json:"at"`
	Ref  timeout.Ref `json:"ref,omitempty"`

	Rule     string        `json:"rule,omitempty"`     // calendar.Rule.String()
	Calendar *calendar.Ref `json:"calendar,omitempty"` // nil: the rule needs none
	From     Instant       `json:"from,omitzero"`      // the instant the rule counted from
	Msg      *Envelope     `json:"msg,omitempty"`      // the timeout's message: rule timeouts, and moved ones (MigrateTimeouts)
	// ID is the timeout's ID on its engine (and its message's MessageID)
	// when it is not the token: a re-planned timeout is scheduled again
	// under a new ID, and so is one moved to another engine
	// (Dispatcher.MigrateTimeouts); a message with another ID (the one
	// scheduled before, if its cancel lost the race) is dropped.
	ID string `json:"id,omitempty"`

	// A recurring timeout (Context.RequestRecurringTimeout,
	// RequestRecurringTimeoutBy) keeps its entry, under the same token,
	// from one occurrence to the next: Occurrence numbers the pending
	// occurrence, from 1 (0: not recurring), and Every is its interval
	// (zero for a rule's). Its From is the nominal time of the occurrence
	// before (or the instant of the request), which Rule counts from.
	Every      time.Duration `json:"every,omitempty"`
	Occurrence int           `json:"occurrence,omitempty"`
}

// Recurring reports whether t is the pending occurrence of a recurring
// timeout.
func (t Timeout) Recurring() bool { return t.Occurrence > 0 }

// Instant is a time kept in 8 bytes (Unix nanoseconds; 0 is the zero
// time), read back in UTC. A Timeout holds one so that it stays within
// 128 bytes, the largest element a Go map keeps inline: a larger one is
// allocated on its own, and every clone of a record's Timeouts would
// allocate once per pending timeout (TestTimeoutSize). Its JSON is
// time.Time's, so records written with a time.Time read the same.
type Instant int64

// InstantOf returns t as an Instant.
func InstantOf(t time.Time) Instant {
	if t.IsZero() {
		return 0
	}
	return Instant(t.UnixNano())
}

// Time returns i as a time.Time in UTC (the zero time for 0).
func (i Instant) Time() time.Time {
	if i == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(i)).UTC()
}

// IsZero reports whether i is the zero time (omitzero uses it).
func (i Instant) IsZero() bool { return i == 0 }

// MarshalJSON writes i as time.Time does.
func (i Instant) MarshalJSON() ([]byte, error) { return i.Time().MarshalJSON() }

// UnmarshalJSON reads a time as time.Time does.
func (i *Instant) UnmarshalJSON(b []byte) error {
	var t time.Time
	if err := t.UnmarshalJSON(b); err != nil {
		return err
	}
	*i = InstantOf(t)
	return nil
}

// Address is where replies to the instance's originator go.
type Address struct {
	ReplyTo       string `json:"reply_to,omitempty"`
	CorrelationID string `json:"correlation_id,omitempty"`
}

// Effect is one outgoing operation of a step.
type Effect struct {
	Kind  EffectKind  `json:"kind"`
	Queue string      `json:"queue,omitempty"`
	Msg   *Envelope   `json:"msg,omitempty"`
	At    time.Time   `json:"at,omitzero"`
	Token string      `json:"token,omitempty"`
	Ref   timeout.Ref `json:"ref,omitempty"`
	// ID is the timeout's ID on its engine if it is not Token (a
	// re-planned timeout).
	ID string `json:"id,omitempty"`
	// Engine is the timeout engine the saga asks for (TimeoutEngine).
	Engine string `json:"engine,omitempty"`
}

// EffectKind says what an Effect does.
type EffectKind string

// The kinds of effect.
const (
	EffectSend     EffectKind = "send"
	EffectPublish  EffectKind = "publish" // to the topic named by Queue
	EffectSchedule EffectKind = "schedule"
	EffectCancel   EffectKind = "cancel"
)

// Envelope is an outgoing message as the outbox keeps it.
type Envelope struct {
	ID            string            `json:"id"`
	Type          string            `json:"type"`
	Body          []byte            `json:"body"`
	ContentType   string            `json:"content_type,omitempty"`
	CorrelationID string            `json:"correlation_id,omitempty"`
	ReplyTo       string            `json:"reply_to,omitempty"`
	SessionID     string            `json:"session_id,omitempty"`
	PartitionKey  string            `json:"partition_key,omitempty"`
	Properties    map[string]string `json:"properties,omitempty"`
}

// Encode returns r's stored form.
func Encode(r *Record) ([]byte, error) { return json.Marshal(r) }

// Decode reads a stored record.
func Decode(b []byte) (*Record, error) {
	r := new(Record)
	if err := json.Unmarshal(b, r); err != nil {
		return nil, err
	}
	return r, nil
}

// HasSends reports whether the outbox holds messages to send: only those
// must be cleared from the record once carried out, because sending them
// again after the queue's DuplicateWindow would deliver them twice.
func (r *Record) HasSends() bool {
	return slices.ContainsFunc(r.Outbox, func(e Effect) bool { return e.Kind == EffectSend || e.Kind == EffectPublish })
}

// Clone returns a copy of r that shares nothing it could change: a
// step changes its record's maps and slices in place.
func (r *Record) Clone() *Record {
	c := *r
	c.FromCache = false // a mark of r, not content
	c.JSONData = slices.Clone(r.JSONData)
	c.BinData = slices.Clone(r.BinData)
	c.Timeouts = maps.Clone(r.Timeouts)
	for tok, te := range c.Timeouts {
		if te.Calendar == nil && te.Msg == nil {
			continue
		}
		if te.Calendar != nil {
			ref := *te.Calendar
			te.Calendar = &ref
		}
		te.Msg = te.Msg.Clone()
		c.Timeouts[tok] = te
	}
	c.Inbox = slices.Clone(r.Inbox)
	c.InboxOlder = slices.Clone(r.InboxOlder)
	c.InboxTimes = slices.Clone(r.InboxTimes)
	c.Expects = slices.Clone(r.Expects)
	c.Index = cloneIndex(r.Index)
	c.IndexNew = cloneIndex(r.IndexNew)
	if r.Outbox != nil {
		c.Outbox = make([]Effect, len(r.Outbox))
		for i, e := range r.Outbox {
			e.Msg = e.Msg.Clone()
			c.Outbox[i] = e
		}
	}
	if r.Originator != nil {
		o := *r.Originator
		c.Originator = &o
	}
	return &c
}

// Clone returns a deep copy of e (nil for nil).
func (e *Envelope) Clone() *Envelope {
	if e == nil {
		return nil
	}
	m := *e
	m.Body = slices.Clone(m.Body)
	m.Properties = maps.Clone(m.Properties)
	return &m
}

func cloneIndex(m map[string][]string) map[string][]string {
	if m == nil {
		return nil
	}
	c := make(map[string][]string, len(m))
	for k, v := range m {
		c[k] = slices.Clone(v)
	}
	return c
}
