package saga

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/timeout"
)

// record is what the Store holds for one saga instance: the user's data
// and everything that makes a step all-or-nothing.
//
// A step writes the new data together with the step's effects (Outbox)
// and the incoming message's identity (Inbox) in one conditional Put.
// Only then are the effects carried out, with IDs fixed in the record, so
// that carrying them out again after a crash is deduplicated downstream;
// if the Outbox sends messages, a second Put clears it and records timeout
// refs, else it stays until the next commit (see carryOutKept). A
// redelivered message whose identity is in the Inbox has no second
// effect: its Outbox, if still there, is carried out, and it is
// acknowledged.
type record struct {
	JSONData json.RawMessage `json:"data,omitempty"` // data the codec made JSON, as is
	BinData  []byte          `json:"bin,omitempty"`  // data in any other encoding, base64
	// Version is the version of the saga's data (DataVersion) the data
	// was written with; 0 for version 1, which records written before
	// versions existed are, and which is written without it, so that a
	// version-1 record reads the same to releases before versions.
	Version int `json:"version,omitempty"`

	Timeouts   map[string]timeoutEntry `json:"timeouts,omitempty"`
	Inbox      []string                `json:"inbox,omitempty"`
	Outbox     []effect                `json:"outbox,omitempty"`
	Originator *address                `json:"originator,omitempty"`
	Completed  bool                    `json:"completed,omitempty"`
	Started    time.Time               `json:"started"`
	Updated    time.Time               `json:"updated"`

	// Expects are the messages the last step expects (Context.Expect):
	// nil for a saga without CheckLiveness, empty if it expects none
	// (omitzero writes an empty list, see liveness.go).
	Expects []string `json:"expects,omitzero"`

	fromCache bool // served by the record cache (cachedRecords), not stored
}

// data returns the instance's encoded data.
func (r *record) data() []byte {
	if len(r.JSONData) > 0 {
		return r.JSONData
	}
	return r.BinData
}

// setData stores encoded data: JSON inline, which saves a base64 pass on
// every step with the default codec; anything else as bytes.
func (r *record) setData(b []byte) {
	r.JSONData, r.BinData = nil, nil
	if json.Valid(b) {
		r.JSONData = b
	} else {
		r.BinData = b
	}
}

// dataVersion returns the version of the record's data: 1 if it has none.
func (r *record) dataVersion() int { return max(r.Version, 1) }

// setDataVersion records the version data was written with.
func (r *record) setDataVersion(v int) {
	r.Version = 0
	if v > 1 {
		r.Version = v
	}
}

// inboxSize bounds the identities kept for deduplication. A message is
// redelivered long before this many newer messages reach one instance.
const inboxSize = 128

// The inbox keeps a 72-bit digest of each identity: identities can be
// long (a MessageID of 128 bytes), and the record is encoded twice and
// decoded once a step.
func inboxDigest(id string) string {
	h := sha256.Sum256([]byte(id))
	return base64.RawURLEncoding.EncodeToString(h[:9])
}

func (r *record) seen(id string) bool { return slices.Contains(r.Inbox, inboxDigest(id)) }

func (r *record) remember(id string) {
	r.Inbox = append(r.Inbox, inboxDigest(id))
	if n := len(r.Inbox) - inboxSize; n > 0 {
		r.Inbox = slices.Delete(r.Inbox, 0, n)
	}
}

// timeoutEntry is a pending timeout, keyed in record.Timeouts by its
// token (the handle). Ref is empty until the timeout has been scheduled.
//
// A timeout requested by a calendar rule (Context.RequestTimeoutBy) also
// keeps the rule, the calendar and the instant the rule counted from, and
// its message, so that it can be planned again under another version of
// the calendar (Dispatcher.ReplanTimeouts). Records written before these
// fields existed load as timeouts requested by an instant.
type timeoutEntry struct {
	Type string      `json:"type"`
	At   time.Time   `json:"at"`
	Ref  timeout.Ref `json:"ref,omitempty"`

	Rule     string        `json:"rule,omitempty"`     // calendar.Rule.String()
	Calendar *calendar.Ref `json:"calendar,omitempty"` // nil: the rule needs none
	From     time.Time     `json:"from,omitzero"`      // the instant the rule counted from
	Msg      *envelope     `json:"msg,omitempty"`      // the timeout's message: rule timeouts, and moved ones (MigrateTimeouts)
	// ID is the timeout's ID on its engine (and its message's MessageID)
	// when it is not the token: a re-planned timeout is scheduled again
	// under a new ID, and so is one moved to another engine
	// (Dispatcher.MigrateTimeouts); a message with another ID (the one
	// scheduled before, if its cancel lost the race) is dropped.
	ID string `json:"id,omitempty"`
}

type address struct {
	ReplyTo       string `json:"reply_to,omitempty"`
	CorrelationID string `json:"correlation_id,omitempty"`
}

// effect is one outgoing operation of a step.
type effect struct {
	Kind  effectKind  `json:"kind"`
	Queue string      `json:"queue,omitempty"`
	Msg   *envelope   `json:"msg,omitempty"`
	At    time.Time   `json:"at,omitzero"`
	Token string      `json:"token,omitempty"`
	Ref   timeout.Ref `json:"ref,omitempty"`
	// ID is the timeout's ID on its engine if it is not Token (a
	// re-planned timeout).
	ID string `json:"id,omitempty"`
	// Engine is the timeout engine the saga asks for (TimeoutEngine).
	Engine string `json:"engine,omitempty"`
}

type effectKind string

const (
	effectSend     effectKind = "send"
	effectPublish  effectKind = "publish" // to the topic named by Queue
	effectSchedule effectKind = "schedule"
	effectCancel   effectKind = "cancel"
)

// envelope is an outgoing message as the outbox keeps it.
type envelope struct {
	ID            string            `json:"id"`
	Type          string            `json:"type"`
	Body          []byte            `json:"body"`
	ContentType   string            `json:"content_type,omitempty"`
	CorrelationID string            `json:"correlation_id,omitempty"`
	ReplyTo       string            `json:"reply_to,omitempty"`
	SessionID     string            `json:"session_id,omitempty"`
	Properties    map[string]string `json:"properties,omitempty"`
}

func encodeRecord(r *record) ([]byte, error) { return json.Marshal(r) }

func decodeRecord(b []byte) (*record, error) {
	r := new(record)
	if err := json.Unmarshal(b, r); err != nil {
		return nil, err
	}
	return r, nil
}

// StoreKey returns the key a Store holds the record of an instance of
// saga sagaName under: the name, a dot, and the ID base64url-encoded
// (without padding), so that any ID is a safe key and NATS subject
// token. For tools and tests that read or restore records (golden
// records of an older version, say); what a record holds is the
// dispatcher's own.
func StoreKey(sagaName, id string) string { return storeKey(sagaName, id) }

// storeKey makes a Store key from saga name and instance ID. The ID is
// base64url-encoded, so any ID is a safe key and NATS subject token.
func storeKey(sagaName, id string) string {
	return sagaName + "." + base64.RawURLEncoding.EncodeToString([]byte(id))
}

// effectID derives the ID of the n-th effect of a step from the saga
// instance and the incoming message's identity: stable across re-runs of
// the same committed step.
func effectID(key, incoming string, n int) string {
	h := sha256.Sum256([]byte(key + "\x00" + incoming + "\x00" + strconv.Itoa(n)))
	return hex.EncodeToString(h[:16])
}
