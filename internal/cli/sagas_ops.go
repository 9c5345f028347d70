package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/queuestore"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// The saga store's key layout (saga/kvstore, saga/record.go): one key per
// instance, "<saga>.<base64url(id)>", whose value is the instance's
// record as JSON. The CLI reads the keys with the KV API and decodes the
// record's fields it shows; TestRecordLayout pins them against a real
// dispatcher's records.

// storedRecord is the part of a saga record the CLI reads.
type storedRecord struct {
	JSONData json.RawMessage `json:"data,omitempty"`
	BinData  []byte          `json:"bin,omitempty"`
	Timeouts map[string]struct {
		Type     string        `json:"type"`
		At       time.Time     `json:"at"`
		Ref      string        `json:"ref"`
		Rule     string        `json:"rule"`
		Calendar *calendar.Ref `json:"calendar"`
		From     time.Time     `json:"from"`
	} `json:"timeouts,omitempty"`
	Inbox      []string          `json:"inbox,omitempty"`
	InboxOlder []byte            `json:"inbox_older,omitempty"` // packed, 9 bytes each (internal/record.InboxDigestLen)
	Outbox     []json.RawMessage `json:"outbox,omitempty"`
	Completed  bool              `json:"completed,omitempty"`
	Started    time.Time         `json:"started"`
	Updated    time.Time         `json:"updated"`
	// Expects: absent (nil) for a saga without saga.CheckLiveness, a list
	// (maybe empty) for one with it.
	Expects []string `json:"expects"`
}

func instanceKey(sagaType, id string) string {
	return sagaType + "." + base64.RawURLEncoding.EncodeToString([]byte(id))
}

// storeName says where the saga records are, as records reads them.
func (e *env) storeName() string {
	if e.store != nil {
		return e.storeLabel
	}
	if e.stateQueue != "" {
		return "the state of queue " + e.stateQueue
	}
	return "bucket " + e.bucket
}

// records returns the saga store the commands read, and the operator's
// dispatcher writes: the state of the queue --state-queue names
// (saga/queuestore), or else the KV bucket --bucket names (saga/kvstore).
// Neither is created or reconfigured: ErrNotFound if it does not exist.
func (e *env) records(ctx context.Context) (saga.ListingStore, error) {
	if e.store != nil {
		return e.store, nil // a store flag's (WithStore)
	}
	if e.stateQueue != "" {
		// e.queue attaches to the queue as it exists (ErrNotFound if it
		// does not), so the store's own open finds it attached.
		if _, err := e.queue(ctx, e.stateQueue); err != nil {
			return nil, fmt.Errorf("--state-queue: %w", err)
		}
		return queuestore.New(e.broker, e.stateQueue), nil
	}
	kv, err := e.js.KeyValue(ctx, e.bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w: saga bucket %q (--bucket)", ErrNotFound, e.bucket)
	}
	if err != nil {
		return nil, err
	}
	return kvStore{kv}, nil
}

// SagaType is a saga type with its number of stored instances.
type SagaType struct {
	Saga      string `json:"saga"`
	Instances int    `json:"instances"`
}

// sagaTypes counts the stored records by saga type (completed instances
// the store still keeps included).
func (e *env) sagaTypes(ctx context.Context) ([]SagaType, error) {
	store, err := e.records(ctx)
	if err != nil {
		return nil, err
	}
	n := map[string]int{}
	for k, err := range store.ListKeys(ctx, "") {
		if err != nil {
			return nil, err
		}
		// The catalog (saga.CatalogKeyPrefix) and the dispatchers' health
		// (saga.HealthKeyPrefix) may share a queue's state with the
		// records; no saga's name has their "=".
		if t, _, ok := strings.Cut(k, "."); ok && !strings.HasPrefix(k, "=") {
			n[t]++
		}
	}
	out := []SagaType{}
	for _, t := range slices.Sorted(maps.Keys(n)) {
		out = append(out, SagaType{Saga: t, Instances: n[t]})
	}
	return out, nil
}

// TimeoutView is a pending timeout as an instance's record holds it.
type TimeoutView struct {
	Handle string    `json:"handle"`
	Type   string    `json:"type"`
	At     time.Time `json:"due"`
	Engine string    `json:"engine"` // "" until scheduled (or if its engine is not in this binary)
	Ref    string    `json:"ref,omitempty"`
	Queue  string    `json:"queue,omitempty"` // transport engine
	Seq    uint64    `json:"seq,omitempty"`   // transport engine
	// Rule, Calendar and From are those of a timeout requested by a
	// calendar rule: the rule, the calendar (name@version) its due time
	// was computed with, and the instant it counted from.
	Rule     string    `json:"rule,omitempty"`
	Calendar string    `json:"calendar,omitempty"`
	From     time.Time `json:"from,omitzero"`
}

// InstanceView is a saga instance as jetsaga shows it.
type InstanceView struct {
	Saga      string    `json:"saga"`
	ID        string    `json:"id"`
	Completed bool      `json:"completed"`
	Started   time.Time `json:"started"`
	Updated   time.Time `json:"updated"`
	Revision  uint64    `json:"revision"`
	// Data is the state: JSON as stored, or base64 for other codecs.
	Data       json.RawMessage `json:"data,omitempty"`
	DataBase64 []byte          `json:"data_base64,omitempty"`
	Timeouts   []TimeoutView   `json:"timeouts"`
	InboxSize  int             `json:"inbox_size"`
	// OutboxSize counts effects committed and not yet carried out.
	OutboxSize int `json:"outbox_size"`
	// Expects are the messages the last step of an instance of a saga
	// with saga.CheckLiveness declared it waits for (saga.Context.Expect):
	// empty if none; absent for a saga without CheckLiveness.
	Expects []string `json:"expects,omitzero"`
	// Stuck: the instance is checked for liveness, running, expects no
	// message and has no pending timeout (as sagas stuck lists it).
	Stuck bool `json:"stuck,omitempty"`
}

// expectsText says what a liveness-checked instance waits for, as its
// last step declared it; "" for an instance that is not checked.
func (v InstanceView) expectsText() string {
	switch {
	case v.Expects == nil:
		return ""
	case len(v.Expects) > 0:
		return strings.Join(v.Expects, ", ")
	case v.Stuck:
		return "no message, and no timeout is pending: stuck"
	case len(v.Timeouts) > 0:
		return "no message (waits for its pending timeouts)"
	}
	return "no message"
}

// parseTransportRef reads a transport engine ref
// "<engine>:<queue>:<seq>@<due>".
func parseTransportRef(ref string) (engine, queue string, seq uint64, ok bool) {
	engine, rest, ok := strings.Cut(ref, ":")
	if !ok {
		return "", "", 0, false
	}
	i := strings.LastIndexByte(rest, ':')
	if i < 0 {
		return engine, "", 0, false
	}
	seqPart, _, _ := strings.Cut(rest[i+1:], "@")
	if _, err := fmt.Sscan(seqPart, &seq); err != nil || transport.ValidateQueueName(rest[:i]) != nil {
		return engine, "", 0, false
	}
	return engine, rest[:i], seq, true
}

func instanceView(sagaType, id string, rev uint64, raw []byte) (InstanceView, error) {
	var r storedRecord
	if err := json.Unmarshal(raw, &r); err != nil {
		return InstanceView{}, fmt.Errorf("saga %s/%s: record unreadable: %w", sagaType, id, err)
	}
	v := InstanceView{Saga: sagaType, ID: id, Completed: r.Completed, Started: r.Started, Updated: r.Updated,
		Revision: rev, Data: r.JSONData, DataBase64: r.BinData, InboxSize: len(r.Inbox) + len(r.InboxOlder)/9, OutboxSize: len(r.Outbox),
		Timeouts: []TimeoutView{}, Expects: r.Expects}
	// As saga's own rule (saga/liveness.go) decides it.
	v.Stuck = r.Expects != nil && len(r.Expects) == 0 && len(r.Timeouts) == 0 && !r.Completed && !r.Started.IsZero()
	for _, h := range slices.Sorted(maps.Keys(r.Timeouts)) {
		t := r.Timeouts[h]
		tv := TimeoutView{Handle: h, Type: t.Type, At: t.At, Ref: t.Ref, Rule: t.Rule, From: t.From}
		if t.Calendar != nil {
			tv.Calendar = t.Calendar.String()
		}
		if t.Ref != "" {
			tv.Engine = timeout.Ref(t.Ref).Engine()
			if _, q, seq, ok := parseTransportRef(t.Ref); ok {
				tv.Queue, tv.Seq = q, seq
			}
		}
		v.Timeouts = append(v.Timeouts, tv)
	}
	slices.SortStableFunc(v.Timeouts, func(a, b TimeoutView) int { return a.At.Compare(b.At) })
	return v, nil
}

// instance reads one instance, or ErrNotFound.
func (e *env) instance(ctx context.Context, sagaType, id string) (InstanceView, error) {
	if err := transport.ValidateQueueName(sagaType); err != nil {
		return InstanceView{}, fmt.Errorf("%w: saga type %q: 1-64 characters of [A-Za-z0-9_-]", ErrUsage, sagaType)
	}
	store, err := e.records(ctx)
	if err != nil {
		return InstanceView{}, err
	}
	return e.instanceIn(ctx, store, sagaType, id)
}

// instanceIn reads one instance from store, or ErrNotFound.
func (e *env) instanceIn(ctx context.Context, store saga.Store, sagaType, id string) (InstanceView, error) {
	raw, rev, err := store.Load(ctx, instanceKey(sagaType, id))
	if errors.Is(err, saga.ErrNotFound) {
		return InstanceView{}, fmt.Errorf("%w: saga %s instance %q", ErrNotFound, sagaType, id)
	}
	if err != nil {
		return InstanceView{}, err
	}
	v, err := instanceView(sagaType, id, rev, raw)
	if err != nil {
		return v, err
	}
	return v, e.locateTimeouts(ctx, &v)
}

// locateTimeouts fills the engine, ref and sequence number of v's
// timeouts whose record has no ref: the dispatcher records a timeout's
// ref only with the instance's next commit (it leaves an outbox of
// timeouts in the record rather than clearing it with a second write),
// so a just-requested timeout is found by listing the engines for the
// instance, by its ID (the handle).
func (e *env) locateTimeouts(ctx context.Context, v *InstanceView) error {
	if !slices.ContainsFunc(v.Timeouts, func(t TimeoutView) bool { return t.Ref == "" }) {
		return nil
	}
	ps, err := e.pendingTimeouts(ctx, "", v.Saga, v.ID)
	if err != nil {
		return err
	}
	for i, t := range v.Timeouts {
		if t.Ref != "" {
			continue
		}
		for _, p := range ps {
			if p.TimeoutID == t.Handle {
				v.Timeouts[i].Engine, v.Timeouts[i].Ref, v.Timeouts[i].Queue, v.Timeouts[i].Seq = p.Engine, p.Ref, p.Queue, p.Seq
				break
			}
		}
	}
	return nil
}

// InstancePage is a page of a saga type's instances, by ID.
type InstancePage struct {
	Saga      string         `json:"saga"`
	Total     int            `json:"total"`
	Instances []InstanceView `json:"instances"`
	// Next is the --after of the next page; empty on the last.
	Next string `json:"next,omitempty"`
}

// instances lists up to limit instances of sagaType with IDs after
// after, in ID order. It reads every key of the type (neither store has
// an ordered range) and the records of the page.
func (e *env) instances(ctx context.Context, sagaType, after string, limit int) (InstancePage, error) {
	if err := transport.ValidateQueueName(sagaType); err != nil {
		return InstancePage{}, fmt.Errorf("%w: saga type %q: 1-64 characters of [A-Za-z0-9_-]", ErrUsage, sagaType)
	}
	store, err := e.records(ctx)
	if err != nil {
		return InstancePage{}, err
	}
	var ids []string
	for k, err := range store.ListKeys(ctx, sagaType+".") {
		if err != nil {
			return InstancePage{}, err
		}
		_, enc, _ := strings.Cut(k, ".")
		if b, err := base64.RawURLEncoding.DecodeString(enc); err == nil {
			ids = append(ids, string(b))
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	page := InstancePage{Saga: sagaType, Total: len(ids), Instances: []InstanceView{}}
	i, _ := slices.BinarySearch(ids, after)
	if after != "" && i < len(ids) && ids[i] == after {
		i++
	}
	for ; i < len(ids) && len(page.Instances) < limit; i++ {
		v, err := e.instanceIn(ctx, store, sagaType, ids[i])
		if errors.Is(err, ErrNotFound) {
			continue // completed and expired meanwhile
		}
		if err != nil {
			return page, err
		}
		page.Instances = append(page.Instances, v)
	}
	if i < len(ids) {
		page.Next = page.Instances[len(page.Instances)-1].ID
	}
	return page, nil
}

// FoundPage is a page of the instances an index value finds, by ID.
type FoundPage struct {
	Saga      string         `json:"saga"`
	Index     string         `json:"index"`
	Value     string         `json:"value"`
	Instances []InstanceView `json:"instances"`
	// Next is the --after of the next page; empty on the last.
	Next string `json:"next,omitempty"`
	// Building: the index is being rebuilt (saga.ErrIndexBuilding), and
	// instances written before it existed may be missing.
	Building bool `json:"building,omitempty"`
}

// find lists up to limit instances of sagaType whose index name holds
// value, with IDs after after, with saga.Lookup.
func (e *env) find(ctx context.Context, sagaType, name, value, after string, limit int) (FoundPage, error) {
	if err := transport.ValidateQueueName(sagaType); err != nil {
		return FoundPage{}, fmt.Errorf("%w: saga type %q: 1-64 characters of [A-Za-z0-9_-]", ErrUsage, sagaType)
	}
	store, err := e.records(ctx)
	if err != nil {
		return FoundPage{}, err
	}
	ids, err := saga.Lookup(ctx, store, sagaType, saga.Where(name, value).After(after).Limit(limit+1))
	page := FoundPage{Saga: sagaType, Index: name, Value: value, Instances: []InstanceView{}, Building: errors.Is(err, saga.ErrIndexBuilding)}
	switch {
	case errors.Is(err, saga.ErrInvalidIndex), errors.Is(err, saga.ErrInvalidIndexValue):
		return page, fmt.Errorf("%w: %w", ErrUsage, err)
	case err != nil && !page.Building:
		return page, err
	}
	for i, id := range ids {
		if i == limit {
			page.Next = ids[i-1]
			break
		}
		v, err := e.instanceIn(ctx, store, sagaType, id)
		if errors.Is(err, ErrNotFound) {
			continue // completed and expired meanwhile
		}
		if err != nil {
			return page, err
		}
		page.Instances = append(page.Instances, v)
	}
	return page, nil
}

// cancelSagaTimeouts cancels an instance's pending timeouts with
// saga.Dispatcher.CancelTimeouts, the same step an application runs:
// it commits the cancel in the record (optimistic concurrency, no race
// with the application's steps) and then cancels the timeouts on their
// engines. The operator has no saga definitions, and needs none: the
// dispatcher is built with a placeholder saga, on queue (the one the
// instance's timeouts are scheduled on, from their refs, unless given) as
// it exists, and the existing store (see records). Timeouts on an engine
// this binary does not have (Temporal without WithEngine) are forgotten
// in the record and cancelled on their engine later, by the application's
// dispatcher (the result's error then matches saga.ErrEffectsPending).
func (e *env) cancelSagaTimeouts(ctx context.Context, sagaType, id, queue string) (saga.CancelResult, error) {
	v, err := e.instance(ctx, sagaType, id)
	if err != nil {
		return saga.CancelResult{}, err
	}
	if queue == "" {
		for _, t := range v.Timeouts {
			if t.Queue != "" {
				queue = t.Queue
				break
			}
		}
	}
	if len(v.Timeouts) == 0 {
		return saga.CancelResult{Saga: sagaType, ID: id}, nil
	}
	if queue == "" {
		return saga.CancelResult{}, fmt.Errorf("%w: no timeout of %s/%s names its dispatcher's queue: give --queue", ErrUsage, sagaType, id)
	}
	d, err := e.operatorDispatcher(ctx, queue)
	if err != nil {
		return saga.CancelResult{}, err
	}
	return d.CancelTimeouts(ctx, sagaType, id)
}

// operatorDispatcher returns a dispatcher for the operator's steps on
// instances (cancel, re-plan): with a placeholder saga, on queue as it
// exists, the existing store (see records) that it never reconfigures,
// and the engines of this binary.
func (e *env) operatorDispatcher(ctx context.Context, queue string, opts ...saga.Option) (*saga.Dispatcher, error) {
	q, err := e.queue(ctx, queue)
	if err != nil {
		return nil, err
	}
	store, err := e.records(ctx)
	if err != nil {
		return nil, err
	}
	var sched timeout.Scheduler = timeout.NewQueue(e.broker)
	if len(e.engines) > 0 {
		r := &timeout.Router{Default: sched}
		for _, name := range slices.Sorted(maps.Keys(e.engines)) {
			r.Routes = append(r.Routes, timeout.Route{Engine: name, Scheduler: e.engines[name], Beyond: math.MaxInt64})
		}
		sched = r
	}
	// The backoff times the application's retry of an engine cancel this
	// binary could not make (a flush message on its queue): in a second.
	return saga.NewDispatcher(e.broker, store, queue, append([]saga.Option{saga.WithSagas(placeholder),
		saga.WithQueueConfig(q.Config()), saga.WithTimeouts(sched), saga.WithLogger(e.rc.logger),
		saga.WithRetry(saga.RetryPolicy{Backoff: func(int) time.Duration { return time.Second }})}, opts...)...)
}

// ReplanView is what timeouts replan did to one timeout.
type ReplanView struct {
	Saga    string    `json:"saga"`
	ID      string    `json:"id"`
	Handle  string    `json:"handle"`
	Type    string    `json:"type"`
	Rule    string    `json:"rule"`
	From    time.Time `json:"from"`
	Old     string    `json:"old_calendar"`
	OldAt   time.Time `json:"old_due"`
	New     string    `json:"new_calendar,omitempty"`
	NewAt   time.Time `json:"new_due,omitzero"`
	Outcome string    `json:"outcome"` // moved, unchanged or failed
	// Overdue, for a timeout moved to a due time already past, is how long
	// that time had passed at the re-plan (a Go duration, "75h0m0s"): it
	// fires at once, and its type's catch-up policy sees it late.
	Overdue string `json:"overdue,omitempty"`
	Error   string `json:"error,omitempty"`
}

// replanTimeouts re-plans the pending timeouts of sagaType on calendar
// ref's name under ref, read from the calendar file file, with
// saga.Dispatcher.ReplanTimeouts: each instance as a step on it, as
// cancelSagaTimeouts does. queue is the application dispatcher's queue;
// by default the one a listed timeout of the calendar names.
func (e *env) replanTimeouts(ctx context.Context, sagaType, file string, ref calendar.Ref, queue string) ([]saga.Replanned, error) {
	if err := transport.ValidateQueueName(sagaType); err != nil {
		return nil, fmt.Errorf("%w: saga type %q: 1-64 characters of [A-Za-z0-9_-]", ErrUsage, sagaType)
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("%w: calendar file: %w", ErrUsage, err)
	}
	defer f.Close()
	days, err := calendar.Load(f)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrUsage, file, err)
	}
	cal, err := calendar.New(ref.Name, ref.Version, days)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	reg := new(calendar.Registry)
	if err := reg.Add(cal); err != nil {
		return nil, err
	}
	if queue == "" {
		ps, err := e.pendingTimeouts(ctx, "", sagaType, "")
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			if p.Queue != "" && strings.HasPrefix(p.Calendar, ref.Name+"@") {
				queue = p.Queue
				break
			}
		}
		if queue == "" {
			return []saga.Replanned{}, nil // no timeout of saga sagaType on the calendar
		}
	}
	d, err := e.operatorDispatcher(ctx, queue, saga.WithCalendars(reg))
	if err != nil {
		return nil, err
	}
	return d.ReplanTimeouts(ctx, sagaType, ref)
}

// placeholder is the saga the operator's dispatcher is built with: it is
// never run (the dispatcher only cancels), and its type never travels.
var placeholder = func() saga.Saga {
	d := saga.Define[struct{}]("jetsaga-operator")
	saga.StartedBy(d, saga.By(func(operatorNoop) string { return "" }),
		func(context.Context, *saga.Context[struct{}], operatorNoop) error { return nil })
	return d
}()

type operatorNoop struct{}

func (operatorNoop) MessageName() string { return "jetsaga.operator-noop" }

// kvStore is a saga.Store on an existing KV bucket, as saga/kvstore keeps
// it, opened without changing the bucket's configuration (kvstore.New
// would create or update it).
type kvStore struct{ kv jetstream.KeyValue }

func (s kvStore) Load(ctx context.Context, key string) ([]byte, uint64, error) {
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, 0, fmt.Errorf("%w: %s", saga.ErrNotFound, key)
	}
	if err != nil {
		return nil, 0, err
	}
	return e.Value(), e.Revision(), nil
}

func (s kvStore) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	var n uint64
	var err error
	if rev == 0 {
		n, err = s.kv.Create(ctx, key, value)
	} else {
		n, err = s.kv.Update(ctx, key, value, rev)
	}
	var apiErr *jetstream.APIError
	if errors.Is(err, jetstream.ErrKeyExists) || errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return 0, fmt.Errorf("%w: %s: %w", saga.ErrConflict, key, err)
	}
	return n, err
}

func (s kvStore) Delete(ctx context.Context, key string, rev uint64) error {
	return fmt.Errorf("jetsaga: the operator store never deletes (%s): %w", key, errors.ErrUnsupported)
}

// DiagramView is a saga's catalog entry as sagas diagram prints it.
type DiagramView struct {
	Saga      string          `json:"saga"`
	Version   int             `json:"version"`
	Queue     string          `json:"queue"`
	Kind      string          `json:"kind"`
	Published time.Time       `json:"published"`
	Mermaid   string          `json:"mermaid"`
	SVG       string          `json:"svg,omitempty"`
	Graph     saga.StateGraph `json:"graph"`
}

// catalogEntry reads the catalog entry of sagaType from the state of
// queue, or of every queue if it is empty, and returns the newest
// version's (of one version, the latest published), or an error matching
// ErrNotFound and saga.ErrNoCatalogEntry.
func (e *env) catalogEntry(ctx context.Context, sagaType, queue string) (saga.CatalogEntry, error) {
	if err := transport.ValidateQueueName(sagaType); err != nil {
		return saga.CatalogEntry{}, fmt.Errorf("%w: saga type %q: 1-64 characters of [A-Za-z0-9_-]", ErrUsage, sagaType)
	}
	var names []string
	if queue != "" {
		if _, err := e.queue(ctx, queue); err != nil {
			return saga.CatalogEntry{}, err
		}
		names = []string{queue}
	} else {
		qs, err := e.listQueues(ctx)
		if err != nil {
			return saga.CatalogEntry{}, err
		}
		for _, qi := range qs {
			names = append(names, qi.Name)
		}
	}
	var best saga.CatalogEntry
	found := false
	for _, name := range names {
		q, err := e.broker.Queue(ctx, name)
		if err != nil {
			return saga.CatalogEntry{}, err
		}
		c, err := saga.LoadCatalogEntry(ctx, q, sagaType)
		if errors.Is(err, saga.ErrNoCatalogEntry) {
			continue
		}
		if err != nil {
			return saga.CatalogEntry{}, err
		}
		if !found || c.Version > best.Version || c.Version == best.Version && c.Published.After(best.Published) {
			best, found = c, true
		}
	}
	if !found {
		return saga.CatalogEntry{}, fmt.Errorf("%w: %w: saga %s: no dispatcher published it (a dispatcher publishes its sagas as it starts)",
			ErrNotFound, saga.ErrNoCatalogEntry, sagaType)
	}
	return best, nil
}

func cmdSagasDiagram(c *call) error {
	if c.o.format != "mermaid" && c.o.format != "svg" {
		return fmt.Errorf("%w: --format %q: mermaid or svg", ErrUsage, c.o.format)
	}
	ce, err := c.env.catalogEntry(c.ctx, c.args[0], c.o.queue)
	if err != nil {
		return err
	}
	v := DiagramView{Saga: ce.Saga, Version: ce.Version, Queue: ce.Queue, Kind: ce.Kind, Published: ce.Published,
		Mermaid: ce.Mermaid, Graph: ce.Graph}
	if c.o.format == "svg" {
		v.SVG = ce.Graph.SVG(ce.Saga, saga.DiagramHighlight{})
	}
	if c.o.json {
		return c.out(v, nil)
	}
	out := v.Mermaid
	if c.o.format == "svg" {
		out = v.SVG
	}
	_, err = io.WriteString(c.stdout, printable(out))
	return err
}

// printable replaces the control characters of s but newline and tab
// with U+FFFD: the catalog is read from the server, and what anyone
// who may write a queue's state put there must not drive the
// operator's terminal.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r != '\n' && r != '\t' && (r < 0x20 || r == 0x7f || 0x80 <= r && r < 0xa0) {
			return '\uFFFD'
		}
		return r
	}, s)
}
