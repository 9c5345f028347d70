package cli

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// QueueInfo is a queue with its message counts.
type QueueInfo struct {
	Name            string `json:"name"`
	Partitions      int    `json:"partitions"`
	RequiresSession bool   `json:"requires_session"`
	// Active, Scheduled and DeadLettered are the queue's transport.Counts:
	// read from the server's bookkeeping, not by browsing messages.
	// Active includes received messages still locked.
	Active       uint64 `json:"active"`
	Scheduled    uint64 `json:"scheduled"`
	DeadLettered uint64 `json:"dead_lettered"`
}

// listQueues lists the jetsaga queues under the prefix, by name.
func (e *env) listQueues(ctx context.Context) ([]QueueInfo, error) {
	byName := map[string]*QueueInfo{}
	lister := e.js.ListStreams(ctx) // by name: queue streams listen on no subject
	for si := range lister.Info() {
		name, ok := strings.CutPrefix(si.Config.Name, e.prefix+"_Q_")
		if !ok {
			continue
		}
		var cfg transport.QueueConfig
		if err := json.Unmarshal([]byte(si.Config.Metadata["jetsaga.config"]), &cfg); err != nil || cfg.Name == "" ||
			!strings.HasPrefix(name, cfg.Name+"_") {
			continue
		}
		qi := byName[cfg.Name]
		if qi == nil {
			qi = &QueueInfo{Name: cfg.Name, Partitions: max(cfg.Partitions, 1), RequiresSession: cfg.RequiresSession}
			byName[cfg.Name] = qi
		}
		qi.Active += si.State.Msgs
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("listing streams: %w", err)
	}
	out := make([]QueueInfo, 0, len(byName))
	for _, qi := range byName {
		if s, err := e.js.Stream(ctx, e.deadLetterStream(qi.Name)); err == nil {
			qi.DeadLettered = s.CachedInfo().State.Msgs
		} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, err
		}
		q, err := e.broker.Queue(ctx, qi.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue // being created or deleted at this instant
		}
		if err != nil {
			return nil, err
		}
		c, err := q.Counts(ctx)
		if err != nil {
			return nil, err
		}
		qi.Active, qi.Scheduled, qi.DeadLettered = uint64(c.Active), uint64(c.Scheduled), uint64(c.DeadLettered)
		out = append(out, *qi)
	}
	slices.SortFunc(out, func(a, b QueueInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// scheduledStart is the first scheduled sequence number of partition p.
func scheduledStart(p int) uint64 {
	return uint64(p)<<transport.PartitionShift | transport.ScheduledBit | 1
}

// MessageView is a browsed message as jetsaga shows it.
type MessageView struct {
	Seq          uint64            `json:"seq"`
	Partition    int               `json:"partition"`
	Local        uint64            `json:"local_seq"`
	State        string            `json:"state"` // active, scheduled, dead-lettered
	Queue        string            `json:"queue"`
	EnqueuedAt   time.Time         `json:"enqueued_at"`
	ScheduledAt  *time.Time        `json:"scheduled_at,omitempty"`
	Type         string            `json:"type,omitempty"` // the jetsaga-type property
	MessageID    string            `json:"message_id,omitempty"`
	Correlation  string            `json:"correlation_id,omitempty"`
	SessionID    string            `json:"session_id,omitempty"`
	PartitionKey string            `json:"partition_key,omitempty"`
	ReplyTo      string            `json:"reply_to,omitempty"`
	Subject      string            `json:"subject,omitempty"`
	ContentType  string            `json:"content_type,omitempty"`
	Properties   map[string]string `json:"properties,omitempty"`
	Size         int               `json:"size"`
	Body         *string           `json:"body,omitempty"`        // with --body, if UTF-8
	BodyBase64   []byte            `json:"body_base64,omitempty"` // with --body, otherwise

	DeadLetterReason      string `json:"dead_letter_reason,omitempty"`
	DeadLetterDescription string `json:"dead_letter_description,omitempty"`
	DeadLetterSource      string `json:"dead_letter_source,omitempty"`
	DeadLetterSeq         uint64 `json:"dead_letter_seq,omitempty"`
}

func viewOf(queue string, m *transport.Message, dead, body bool) MessageView {
	v := MessageView{
		Seq: m.Seq, Partition: transport.Partition(m.Seq), Local: transport.LocalSeq(m.Seq),
		State: m.State.String(), Queue: queue, EnqueuedAt: m.EnqueuedAt,
		Type: m.Properties[saga.TypeProperty], MessageID: m.MessageID, Correlation: m.CorrelationID,
		SessionID: m.SessionID, PartitionKey: m.PartitionKey, ReplyTo: m.ReplyTo, Subject: m.Subject, ContentType: m.ContentType,
		Properties: m.Properties, Size: len(m.Body),
		DeadLetterReason: m.DeadLetterReason, DeadLetterDescription: m.DeadLetterDescription,
		DeadLetterSource: m.DeadLetterSource, DeadLetterSeq: m.DeadLetterSeq,
	}
	if dead {
		v.State = "dead-lettered"
	}
	if !m.ScheduledAt.IsZero() {
		t := m.ScheduledAt
		v.ScheduledAt = &t
	}
	if body {
		if utf8.Valid(m.Body) {
			s := string(m.Body)
			v.Body = &s
		} else {
			v.BodyBase64 = m.Body
		}
	}
	return v
}

// browseFilter selects browsed messages.
type browseFilter struct {
	state        string // "", "active", "scheduled"
	reason, typ  string
	since, until time.Time // on EnqueuedAt
}

func (f browseFilter) match(m *transport.Message) bool {
	return (f.state == "" || f.state == "all" || f.state == m.State.String()) &&
		(f.reason == "" || f.reason == m.DeadLetterReason) &&
		(f.typ == "" || f.typ == m.Properties[saga.TypeProperty]) &&
		(f.since.IsZero() || !m.EnqueuedAt.Before(f.since)) &&
		(f.until.IsZero() || m.EnqueuedAt.Before(f.until))
}

// browse returns up to max messages of q from sequence number from that f
// selects, and the sequence number to continue from (0 at the end).
func browse(ctx context.Context, q browsable, name string, from uint64, max int, f browseFilter, dead, body bool) ([]MessageView, uint64, error) {
	out := []MessageView{}
	for m, err := range q.Browse(ctx, from) {
		if err != nil {
			return nil, 0, err
		}
		if len(out) == max {
			return out, m.Seq, nil
		}
		if f.match(m) {
			out = append(out, viewOf(name, m, dead, body))
		}
	}
	return out, 0, nil
}

// CancelOutcome is the definite outcome of cancelling one scheduled
// message.
type CancelOutcome struct {
	Seq     uint64 `json:"seq"`
	Outcome string `json:"outcome"` // cancelled, already-activated, not-found, error
	Error   string `json:"error,omitempty"`
	err     error
}

// canceller cancels scheduled messages: a queue or a topic.
type canceller interface {
	Cancel(ctx context.Context, seq uint64) error
}

func cancelScheduled(ctx context.Context, q canceller, seq uint64) CancelOutcome {
	err := q.Cancel(ctx, seq)
	o := CancelOutcome{Seq: seq, Outcome: "cancelled", err: err}
	switch {
	case err == nil:
	case errors.Is(err, transport.ErrAlreadyActivated):
		o.Outcome = "already-activated"
	case errors.Is(err, transport.ErrNotFound):
		o.Outcome = "not-found"
	default:
		o.Outcome = "error"
	}
	if err != nil {
		o.Error = err.Error()
	}
	return o
}

// deadFilter selects dead letters: by sequence numbers, or by reason,
// type and time, or all.
type deadFilter struct {
	seqs []uint64
	browseFilter
	all bool
}

func (f deadFilter) empty() bool {
	return len(f.seqs) == 0 && !f.all && f.reason == "" && f.typ == "" && f.since.IsZero() && f.until.IsZero()
}

func (f deadFilter) match(m *transport.Message) bool {
	if len(f.seqs) > 0 && !slices.Contains(f.seqs, m.Seq) {
		return false
	}
	return f.browseFilter.match(m)
}

// DeadLetterOutcome is what resubmit or purge did with one dead letter.
type DeadLetterOutcome struct {
	Seq       uint64 `json:"seq"`
	MessageID string `json:"message_id,omitempty"`
	// SentAs is the MessageID of the message sent back (resubmit).
	SentAs string `json:"sent_as,omitempty"`
	// Queue is the queue or subscription the dead letter belonged to.
	Queue string `json:"queue"`
	// SentTo is the queue or topic it was sent to (resubmit).
	SentTo  string `json:"sent_to,omitempty"`
	Outcome string `json:"outcome"` // resubmitted, duplicate, purged, gone, error
	Error   string `json:"error,omitempty"`
}

// resubmitID is the MessageID a resubmitted dead letter is sent under:
// its own, so that the transport and the saga inbox deduplicate a replay;
// for a dead letter without one (or with newID), one derived from the
// dead letter itself, the same every time that dead letter is resubmitted.
func resubmitID(m *transport.Message, newID bool) string {
	if m.MessageID != "" && !newID {
		return m.MessageID
	}
	h := sha256.Sum256([]byte(m.MessageID + "\x00" + m.DeadLetterSource + "\x00" +
		strconv.FormatUint(m.Seq, 10) + "\x00" + strconv.FormatInt(m.EnqueuedAt.UnixNano(), 10)))
	return "resubmit-" + base64.RawURLEncoding.EncodeToString(h[:18])
}

// PropertyResubmitOf is set on a dead letter resubmitted under a new
// MessageID (--new-id) to the MessageID it had.
const PropertyResubmitOf = "jetsaga-resubmit-of"

// resubmitMessage is the message a dead letter is sent back as: as it was
// first sent, without the dead-letter fields and the broker's facts.
func resubmitMessage(m *transport.Message, newID bool) *transport.Message {
	c := m.Clone()
	c.MessageID = resubmitID(m, newID)
	if newID && m.MessageID != "" {
		if c.Properties == nil {
			c.Properties = map[string]string{}
		}
		c.Properties[PropertyResubmitOf] = m.MessageID
	}
	c.Seq, c.EnqueuedAt, c.State, c.ScheduledAt = 0, time.Time{}, 0, time.Time{}
	c.DeadLetterReason, c.DeadLetterDescription, c.DeadLetterSource, c.DeadLetterSeq = "", "", "", 0
	return c
}

// settleDead receives the dead letters of dlq (the dead-letter queue of
// the queue or subscription name) that f selects and does act with each
// (it settles the delivery); others received meanwhile stay locked until
// the end and are then released. It stops when every dead letter it
// browsed is done, or when nothing more arrives within idle.
func settleDead(ctx context.Context, dlq *transport.Queue, name string, f deadFilter, idle time.Duration, act func(*transport.Delivery) DeadLetterOutcome) ([]DeadLetterOutcome, error) {
	want := map[uint64]bool{}
	for m, err := range dlq.Browse(ctx, 0) {
		if err != nil {
			return nil, err
		}
		if f.match(m) {
			want[m.Seq] = true
		}
	}
	var out []DeadLetterOutcome
	for _, s := range f.seqs {
		if !want[s] {
			out = append(out, DeadLetterOutcome{Seq: s, Queue: name, Outcome: "not-found"})
		}
	}
	var held []*transport.Delivery
	defer func() {
		for _, d := range held {
			_ = d.Abandon(context.WithoutCancel(ctx))
		}
	}()
	for len(want) > 0 {
		rctx, cancel := context.WithTimeout(ctx, idle)
		ds, err := dlq.Receive(rctx, 64)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) {
				break
			}
			return out, err
		}
		for _, d := range ds {
			if !want[d.Seq] {
				held = append(held, d)
				continue
			}
			delete(want, d.Seq)
			out = append(out, act(d))
		}
	}
	for _, s := range slices.Sorted(maps.Keys(want)) {
		// Browsed, but received by someone else meanwhile (or locked).
		out = append(out, DeadLetterOutcome{Seq: s, Queue: name, Outcome: "gone",
			Error: "no longer receivable: received by another consumer, or locked"})
	}
	slices.SortStableFunc(out, func(a, b DeadLetterOutcome) int { return cmp.Compare(a.Seq, b.Seq) })
	return out, nil
}

// destination is where resubmit sends dead letters: a queue (by default
// the one they were dead-lettered from), or a topic.
type destination struct {
	s      sender
	name   string
	window time.Duration // its DuplicateWindow
}

func queueDestination(q *transport.Queue) destination {
	return destination{s: q, name: q.Name(), window: q.Config().DuplicateWindow}
}

// resubmit sends the selected dead letters of x to dst, keeping their
// MessageID, and removes each from the dead-letter queue once sent. A
// dead letter whose MessageID dst still remembers (its DuplicateWindow
// since it was first sent has not passed) is not sent: the outcome is
// "duplicate" and it stays in the dead-letter queue.
func resubmit(ctx context.Context, x entity, dst destination, f deadFilter, newID bool, idle time.Duration) ([]DeadLetterOutcome, error) {
	return settleDead(ctx, x.deadLetters(), x.path, f, idle, func(d *transport.Delivery) DeadLetterOutcome {
		m := resubmitMessage(d.Message, newID)
		o := DeadLetterOutcome{Seq: d.Seq, MessageID: d.MessageID, SentAs: m.MessageID, Queue: x.path, SentTo: dst.name}
		res, err := dst.s.Send(ctx, m)
		switch {
		case err != nil:
			o.Outcome, o.Error = "error", err.Error()
			_ = d.Abandon(ctx)
		case res.Duplicate:
			o.Outcome = "duplicate"
			o.Error = fmt.Sprintf("%s still remembers MessageID %q (DuplicateWindow %v): nothing sent; "+
				"it stays in the dead-letter queue; resubmit after the window, or with --new-id",
				dst.name, m.MessageID, dst.window)
			_ = d.Abandon(ctx)
		default:
			o.Outcome = "resubmitted"
			if err := d.Complete(ctx); err != nil {
				o.Error = "sent; removing it from the dead-letter queue failed (a repeated resubmit is deduplicated): " + err.Error()
			}
		}
		return o
	})
}

// purgeDead removes the selected dead letters.
func purgeDead(ctx context.Context, x entity, f deadFilter, idle time.Duration) ([]DeadLetterOutcome, error) {
	return settleDead(ctx, x.deadLetters(), x.path, f, idle, func(d *transport.Delivery) DeadLetterOutcome {
		o := DeadLetterOutcome{Seq: d.Seq, MessageID: d.MessageID, Queue: x.path, Outcome: "purged"}
		if err := d.Complete(ctx); err != nil {
			o.Outcome, o.Error = "error", err.Error()
		}
		return o
	})
}

// purgeAllDead empties the dead-letter queue of x with one stream purge.
func (e *env) purgeAllDead(ctx context.Context, x entity) (uint64, error) {
	s, err := e.js.Stream(ctx, e.entityDeadLetterStream(x))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, fmt.Errorf("%w: dead-letter queue of %q", ErrNotFound, x.path)
	}
	if err != nil {
		return 0, err
	}
	n := s.CachedInfo().State.Msgs
	if err := s.Purge(ctx); err != nil {
		return 0, err
	}
	return n, nil
}

// PendingView is a pending timeout on some engine.
type PendingView struct {
	Engine    string    `json:"engine"`
	Saga      string    `json:"saga"`
	ID        string    `json:"id"`
	Type      string    `json:"type,omitempty"`
	At        time.Time `json:"due"`
	Queue     string    `json:"queue,omitempty"`
	Seq       uint64    `json:"seq,omitempty"`
	Ref       string    `json:"ref,omitempty"`
	TimeoutID string    `json:"timeout_id,omitempty"`
	// Rule and Calendar (name@version) are those of a timeout requested by
	// a calendar rule (saga.PropertyRule, saga.PropertyCalendar).
	Rule     string `json:"rule,omitempty"`
	Calendar string `json:"calendar,omitempty"`
	// Activating marks a timeout activated early and not yet due: its
	// message is on the queue (Seq is its active sequence number), held
	// by a dispatcher until its due time (timeout.Activating).
	Activating bool `json:"activating,omitempty"`
}

// withPlan fills the rule fields of pv from a timeout message's
// properties.
func (pv PendingView) withPlan(props map[string]string) PendingView {
	pv.Rule = props[saga.PropertyRule]
	if name := props[saga.PropertyCalendar]; name != "" {
		pv.Calendar = calendar.Ref{Name: name, Version: props[saga.PropertyCalendarVersion]}.String()
	}
	return pv
}

// pendingTimeouts lists pending timeouts on every engine: the transport
// engine by browsing the scheduled messages of queue (every queue if
// empty) for timeouts (any queue engine name), then each engine added
// with WithEngine. Errors of an engine do not stop the others.
func (e *env) pendingTimeouts(ctx context.Context, queue, sagaType, id string) ([]PendingView, error) {
	var queues []string
	if queue != "" {
		if _, err := e.queue(ctx, queue); err != nil {
			return nil, err
		}
		queues = []string{queue}
	} else {
		qs, err := e.listQueueNames(ctx)
		if err != nil {
			return nil, err
		}
		queues = qs
	}
	var out []PendingView
	var errs []error
	for _, name := range queues {
		q, err := e.listedQueue(ctx, name)
		if err != nil {
			errs = append(errs, fmt.Errorf("queue %s: %w", name, err))
			continue
		}
		for p := range q.Config().Partitions {
			for m, err := range q.Browse(ctx, scheduledStart(p)) {
				if err != nil {
					errs = append(errs, fmt.Errorf("queue %s: %w", name, err))
					break
				}
				if transport.Partition(m.Seq) != p || m.State != transport.Scheduled {
					break
				}
				engine := m.Properties[timeout.PropertyTimeout]
				if engine == "" || m.Properties[saga.TypeProperty] == "jetsaga.flush" {
					continue
				}
				if engine == "1" {
					engine = timeout.QueueEngine
				}
				at := m.ScheduledAt // activated early by its engine's lead before the due time
				if due, err := time.Parse(time.RFC3339Nano, m.Properties[timeout.PropertyDue]); err == nil {
					at = due
				}
				pv := PendingView{Engine: engine, Saga: m.Properties[timeout.PropertySaga], ID: m.Properties[timeout.PropertyInstance],
					Type: m.Properties[saga.TypeProperty], At: at, Queue: name, Seq: m.Seq, TimeoutID: m.MessageID}.withPlan(m.Properties)
				if (sagaType == "" || pv.Saga == sagaType) && (id == "" || pv.ID == id) {
					out = append(out, pv)
				}
			}
		}
		// Timeouts activated early and held until their due time: the
		// command does not know the engines' leads, so it reads the tail
		// of the longest one.
		for p, err := range timeout.Activating(ctx, q, timeout.MaxEarlyActivation, time.Now()) {
			if err != nil {
				errs = append(errs, fmt.Errorf("queue %s: %w", name, err))
				break
			}
			if p.Properties[saga.TypeProperty] == "jetsaga.flush" || (sagaType != "" && p.Saga != sagaType) || (id != "" && p.Instance != id) {
				continue
			}
			out = append(out, PendingView{Engine: p.Ref.Engine(), Saga: p.Saga, ID: p.Instance, Type: p.Properties[saga.TypeProperty],
				At: p.At, Queue: name, Seq: p.Seq, Ref: string(p.Ref), TimeoutID: p.ID, Activating: true}.withPlan(p.Properties))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(e.engines)) {
		for p, err := range timeout.List(ctx, e.engines[name], timeout.Filter{Queue: queue, Saga: sagaType, Instance: id}) {
			if err != nil {
				errs = append(errs, fmt.Errorf("engine %s: %w", name, err))
				break
			}
			out = append(out, PendingView{Engine: name, Saga: p.Saga, ID: p.Instance, Type: p.Properties[saga.TypeProperty],
				At: p.At, Queue: p.Queue, Seq: p.Seq, Ref: string(p.Ref), TimeoutID: p.ID}.withPlan(p.Properties))
		}
	}
	slices.SortStableFunc(out, func(a, b PendingView) int { return a.At.Compare(b.At) })
	if len(errs) > 0 {
		return out, fmt.Errorf("%w: %w", ErrPartial, errors.Join(errs...))
	}
	return out, nil
}

// queueSettle bounds how long listedQueue waits for a queue to be whole.
const queueSettle = 2 * time.Second

// listedQueue opens a queue a listing found. A queue is created (and
// deleted) one stream at a time, so a listing can meet one that is not
// whole yet: it is waited for, up to queueSettle; a queue still missing a
// stream after that is damaged, and its error is returned.
func (e *env) listedQueue(ctx context.Context, name string) (*transport.Queue, error) {
	deadline := time.Now().Add(queueSettle)
	for {
		q, err := e.broker.Queue(ctx, name)
		if err == nil || !errors.Is(err, jetstream.ErrStreamNotFound) && !errors.Is(err, jetstream.ErrConsumerNotFound) || time.Now().After(deadline) {
			return q, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (e *env) listQueueNames(ctx context.Context) ([]string, error) {
	var out []string
	lister := e.js.ListStreams(ctx) // by name: queue streams listen on no subject
	for si := range lister.Info() {
		var cfg transport.QueueConfig
		if json.Unmarshal([]byte(si.Config.Metadata["jetsaga.config"]), &cfg) == nil && si.Config.Name == e.queueStream(cfg.Name, 0) {
			out = append(out, cfg.Name)
		}
	}
	if err := lister.Err(); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

// QueueShow is a queue with its counts and the work waiting per
// PartitionKey, from a bounded browse.
type QueueShow struct {
	Queue        string `json:"queue"`
	Partitions   int    `json:"partitions"`
	Active       uint64 `json:"active"`
	Scheduled    uint64 `json:"scheduled"`
	DeadLettered uint64 `json:"dead_lettered"`
	// Read is how many messages the browse read (at most --max); Complete
	// is true if that was every message.
	Read     int  `json:"read"`
	Complete bool `json:"complete"`
	// WithoutKey counts the messages read that have no PartitionKey.
	WithoutKey int `json:"without_key"`
	// Keys is how many distinct keys the messages read have; TopKeys the
	// topKeys of them with the most messages.
	Keys    int       `json:"keys"`
	TopKeys []KeyWork `json:"top_keys"`
	// Dispatchers are the saga dispatchers running on the queue, as they
	// report themselves (saga.HealthRecord): whether each waits out an
	// outage, since when, after how many attempts.
	Dispatchers []saga.HealthRecord `json:"dispatchers"`
}

// KeyWork is how many of the messages read carry one PartitionKey.
type KeyWork struct {
	Key       string `json:"key"`
	Active    int    `json:"active"`
	Scheduled int    `json:"scheduled"`
}

// topKeys is how many keys queues show lists.
const topKeys = 10

// showQueue counts q's messages by PartitionKey, reading at most max of
// them from sequence number from. Memory: one entry per distinct key
// among the messages read, so at most max.
func showQueue(ctx context.Context, q *transport.Queue, from uint64, max int) (QueueShow, error) {
	c, err := q.Counts(ctx)
	if err != nil {
		return QueueShow{}, err
	}
	v := QueueShow{Queue: q.Name(), Partitions: q.Config().Partitions, Active: uint64(c.Active), Scheduled: uint64(c.Scheduled),
		DeadLettered: uint64(c.DeadLettered), Complete: true, TopKeys: []KeyWork{}}
	v.Partitions = cmp.Or(v.Partitions, 1)
	byKey := map[string]*KeyWork{}
	for m, err := range q.Browse(ctx, from) {
		if err != nil {
			return QueueShow{}, err
		}
		if v.Read == max {
			v.Complete = false
			break
		}
		v.Read++
		if m.PartitionKey == "" {
			v.WithoutKey++
			continue
		}
		k := byKey[m.PartitionKey]
		if k == nil {
			k = &KeyWork{Key: m.PartitionKey}
			byKey[m.PartitionKey] = k
		}
		if m.State == transport.Scheduled {
			k.Scheduled++
		} else {
			k.Active++
		}
	}
	v.Keys = len(byKey)
	for _, k := range byKey {
		v.TopKeys = append(v.TopKeys, *k)
	}
	slices.SortFunc(v.TopKeys, func(a, b KeyWork) int {
		return cmp.Or(cmp.Compare(b.Active+b.Scheduled, a.Active+a.Scheduled), strings.Compare(a.Key, b.Key))
	})
	v.TopKeys = v.TopKeys[:min(len(v.TopKeys), topKeys)]
	v.Dispatchers, err = dispatchers(ctx, q)
	return v, err
}

// dispatchers lists the health records of the dispatchers running on q,
// the longest waiting first, then by host and process.
func dispatchers(ctx context.Context, q *transport.Queue) ([]saga.HealthRecord, error) {
	out := []saga.HealthRecord{}
	for h, err := range saga.ReadHealth(ctx, q) {
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b saga.HealthRecord) int {
		if a.Waiting != b.Waiting {
			if a.Waiting {
				return -1
			}
			return 1
		}
		return cmp.Or(a.Since.Compare(b.Since), strings.Compare(a.Host, b.Host), cmp.Compare(a.PID, b.PID))
	})
	return out, nil
}

// healthLine says in a few words what a dispatcher's health record says.
func healthLine(h saga.HealthRecord) string {
	if !h.Waiting {
		return "running"
	}
	return fmt.Sprintf("waiting for a dependency since %s, %d attempts: %s", h.Since.Format(time.RFC3339), h.Attempts, h.Error)
}
