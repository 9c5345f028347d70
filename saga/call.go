package saga

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// Calls to the outside world.
//
// A step commits all or nothing, and a redelivery of a committed message
// has no second effect; but the handler itself runs again whenever its
// step did not commit — a conflict, an outage, a retry, a process killed
// after the call and before the commit. Call gives a call to another
// system (a payment, an e-mail, an HTTP API) what the step's own effects
// have:
//
//   - a key that is the same on every run of the same step (saga,
//     instance, the message or timeout handled, the call's name and its
//     ordinal among the step's calls of that name — never the attempt),
//     for the provider's idempotency key;
//   - an intent recorded in the store before the call, so that a run that
//     finds it without an outcome knows that an earlier run may have made
//     the call (a crash in between);
//   - the outcome kept for the re-runs of the step in this process (a
//     conflict, an outage), and written to the store when the step does
//     not commit, so that a delayed retry elsewhere returns it without a
//     second call;
//   - a policy for the unknown outcome: call again with the same key while
//     the provider remembers it (RetryWithin, the default, 24 hours), ask
//     the provider (ReconcileWith), or never call again (AtMostOnce);
//     whatever the policy cannot settle is ErrCallInDoubt.
//
// The intent is one store write (with the call's record expiring after
// the key window); a step that makes no call writes nothing more.

var (
	// ErrCallInDoubt says that an earlier run of the step may have made a
	// call and its outcome is unknown (the process died between the
	// intent and the outcome), and the call's policy cannot settle it:
	// AtMostOnce, or RetryWithin past its window. It matches ErrPermanent:
	// a handler that returns it dead-letters the message with
	// ReasonCallInDoubt; a handler that handles it (say, by marking the
	// instance for an operator) goes on.
	ErrCallInDoubt = errors.New("saga: outcome of an earlier call unknown")

	// ErrInvalidCall is returned by Call for an invalid name or option, as
	// a Permanent error.
	ErrInvalidCall = errors.New("saga: invalid call")
)

// ReasonCallInDoubt: the step failed with ErrCallInDoubt (see Call).
const ReasonCallInDoubt = "CallInDoubt"

// DefaultCallWindow is how long RetryWithin's default assumes a provider
// remembers an idempotency key (Stripe: 24 hours).
const DefaultCallWindow = 24 * time.Hour

// A CallOption sets the policy of a Call for an outcome an earlier run
// left unknown.
type CallOption func(*callConfig)

type callConfig struct {
	policy    callPolicy
	window    time.Duration
	reconcile func(ctx context.Context, key string) (any, bool, error)
	err       error
}

type callPolicy int

const (
	policyRetry callPolicy = iota
	policyReconcile
	policyAtMostOnce
)

// RetryWithin makes a call whose outcome an earlier run left unknown be
// made again, with the same key, while window (the provider's idempotency
// key window) has not passed since the first run's intent; after it, Call
// returns ErrCallInDoubt instead of calling with a key the provider may
// have forgotten. The default policy, with DefaultCallWindow.
func RetryWithin(window time.Duration) CallOption {
	return func(c *callConfig) {
		if window <= 0 {
			c.err = fmt.Errorf("%w: RetryWithin(%v): the window must be positive", ErrInvalidCall, window)
		}
		c.policy, c.window = policyRetry, window
	}
}

// ReconcileWith makes a call whose outcome an earlier run left unknown ask
// the provider first: reconcile looks key up and returns its result and
// true if the call was made, false if it was not (Call then makes it). An
// error from reconcile is Call's (the step fails, and is retried).
func ReconcileWith[R any](reconcile func(ctx context.Context, key string) (R, bool, error)) CallOption {
	return func(c *callConfig) {
		c.policy, c.window = policyReconcile, 0
		c.reconcile = func(ctx context.Context, key string) (any, bool, error) { return reconcile(ctx, key) }
	}
}

// AtMostOnce makes a call whose outcome an earlier run left unknown —
// or that failed with an error that is not Permanent, which leaves it
// unknown too — never be made again: Call returns ErrCallInDoubt.
func AtMostOnce() CallOption {
	return func(c *callConfig) { c.policy, c.window = policyAtMostOnce, 0 }
}

// Call runs call, a call to the outside world from a handler of c's
// step, under the name given (1–64 letters, digits, '-', '_', '.'), and
// returns its result. call gets the call's key, the same on every run of
// this step: pass it to the provider as its idempotency key.
//
// Within one run of a step, calls of the same name are told apart by
// their order (the third "email" of a step is always the third). A run
// that finds the call's outcome — from an earlier run of the step in this
// process, or written to the store when that run did not commit — returns
// it without calling: the result, or a Permanent error as the error's
// text. A run that finds only the intent of an earlier one (it died
// mid-call, or the call failed with an error that is not Permanent)
// follows the policy (RetryWithin by default, ReconcileWith, AtMostOnce).
// Otherwise Call records the intent and calls.
//
// R must survive the dispatcher's Codec (JSON by default): a result read
// back from the store is decoded into a new R.
//
// Call fails with ErrUnavailable if the store cannot record the intent
// (the dispatcher waits, as for any outage), and on a step that started
// from a cached record it first has the step run again from the store (a
// call is never made on state that may be stale).
func Call[S, R any](ctx context.Context, c *Context[S], name string, call func(ctx context.Context, key string) (R, error), opts ...CallOption) (R, error) {
	var zero R
	cfg := callConfig{policy: policyRetry, window: DefaultCallWindow}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.err != nil {
		return zero, Permanent(cfg.err)
	}
	if err := validateCallName(name); err != nil {
		return zero, Permanent(err)
	}
	s := c.step
	if s.mayBeStale {
		s.reload = true
		return zero, errStale
	}
	key := s.callKey(name)
	d := s.d
	if o, ok := d.calls.get(s.in, key); ok {
		s.made = append(s.made, key)
		return decodeOutcome[R](s, name, o)
	}
	outer := s.outerCtx()
	stored, rev, err := d.loadCall(outer, key)
	switch {
	case err != nil:
		return zero, err
	case stored != nil && stored.State != callIntent:
		stored.rev, stored.saved = rev, true
		d.calls.put(s.in, key, *stored)
		s.made = append(s.made, key)
		return decodeOutcome[R](s, name, *stored)
	case stored != nil:
		// An earlier run recorded the intent and no outcome.
		switch cfg.policy {
		case policyAtMostOnce:
			return zero, s.inDoubt(name, key, stored, "the call's policy is AtMostOnce")
		case policyRetry:
			if age := s.now.Sub(stored.At); age > cfg.window {
				return zero, s.inDoubt(name, key, stored, fmt.Sprintf("its key window (%v) passed %v ago", cfg.window, age-cfg.window))
			}
		case policyReconcile:
			v, found, err := cfg.reconcile(ctx, key)
			if err != nil {
				return zero, fmt.Errorf("saga %s/%s: call %s: reconcile: %w", s.sagaName, s.id, name, err)
			}
			if found {
				r, ok := v.(R)
				if !ok {
					return zero, Permanent(fmt.Errorf("%w: call %s: ReconcileWith returns %T, the call %T", ErrInvalidCall, name, v, zero))
				}
				d.remember(s, key, name, rev, r, nil)
				return r, nil
			}
		}
	default:
		rec := callRecord{Saga: s.sagaName, ID: s.id, Name: name, Key: key, Step: s.identity, State: callIntent, At: s.now.UTC()}
		if rev, err = d.putCall(outer, key, &rec, 0, cfg.window); err != nil {
			return zero, err
		}
	}
	r, err := call(ctx, key)
	switch {
	case err == nil:
		d.remember(s, key, name, rev, r, nil)
	case errors.Is(err, ErrPermanent):
		d.remember(s, key, name, rev, zero, err)
	}
	return r, err
}

// callKey returns the key of the step's next call named name.
func (s *stepState) callKey(name string) string {
	if s.calls == nil {
		s.calls = map[string]int{}
	}
	n := s.calls[name]
	s.calls[name] = n + 1
	h := sha256.Sum256([]byte(s.key + "\x00" + s.identity + "\x00" + name + "\x00" + strconv.Itoa(n)))
	return "jetsaga-" + hex.EncodeToString(h[:16])
}

// outerCtx is the step's context outside its unit of work, if it runs in
// one: the intent must be durable before the call, not when the unit
// commits.
func (s *stepState) outerCtx() context.Context {
	if s.outer != nil {
		return s.outer
	}
	return s.ctx
}

// inDoubt logs and returns ErrCallInDoubt for the call name (key).
func (s *stepState) inDoubt(name, key string, rec *callRecord, why string) error {
	s.d.cfg.logger.LogAttrs(s.ctx, slog.LevelError, "saga: outcome of an earlier call unknown",
		slog.String("saga.type", s.sagaName), slog.String("saga.id", s.id), slog.String("call", name),
		slog.String("key", key), slog.Time("intent", rec.At), slog.String("why", why))
	return Permanent(fmt.Errorf("saga %s/%s: call %s (key %s, first made %s): %w: %s", s.sagaName, s.id, name, key,
		rec.At.Format(time.RFC3339), ErrCallInDoubt, why))
}

func validateCallName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%w: name %.80q: must be 1-64 characters", ErrInvalidCall, name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("%w: name %.80q: only letters, digits, '-', '_' and '.'", ErrInvalidCall, name)
		}
	}
	return nil
}

// States of a call's record.
const (
	callIntent = "intent" // made, or about to be; outcome unknown
	callDone   = "done"   // Result holds the result
	callFailed = "failed" // Error holds a Permanent error's text
)

// callRecord is a call's record in the store, under callStoreKey(key).
type callRecord struct {
	Saga   string          `json:"saga"`
	ID     string          `json:"id"`
	Name   string          `json:"name"`
	Key    string          `json:"key"`
	Step   string          `json:"step,omitempty"` // the identity of the message the step handles
	State  string          `json:"state"`
	At     time.Time       `json:"at"` // the first run's intent
	Result json.RawMessage `json:"result,omitempty"`
	Bin    []byte          `json:"bin,omitempty"` // a result the codec did not make JSON
	Error  string          `json:"error,omitempty"`

	value any    // in memory: the result as the call returned it
	rev   uint64 // in memory: the record's revision in the store, 0 if none
	saved bool   // in memory: the outcome is in the store
}

// CallKeyPrefix starts the store keys of the records of calls (see
// Call), beside the instances' records. Like the other keys of the
// dispatcher's own (CatalogKeyPrefix, HealthKeyPrefix), it starts with
// "=", which no saga's name has: a tool that lists a store's keys skips
// them.
const CallKeyPrefix = "=call."

func callStoreKey(key string) string { return CallKeyPrefix + key }

// loadCall returns the record of the call key, or nil if there is none.
func (d *Dispatcher) loadCall(ctx context.Context, key string) (*callRecord, uint64, error) {
	raw, rev, err := d.store.Load(ctx, callStoreKey(key))
	if errors.Is(err, ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("saga: call %s: loading its record: %w", key, err)
	}
	var rec callRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return nil, 0, Permanent(fmt.Errorf("saga: call %s: its record: %w", key, err))
	}
	return &rec, rev, nil
}

// putCall writes the record of the call key at rev, expiring after ttl
// (or after a day, whichever is longer) on an ExpiringStore.
func (d *Dispatcher) putCall(ctx context.Context, key string, rec *callRecord, rev uint64, ttl time.Duration) (uint64, error) {
	raw, err := json.Marshal(rec)
	if err != nil {
		return 0, err
	}
	ttl = max(ttl, DefaultCallWindow) + time.Hour
	if es, ok := d.store.(ExpiringStore); ok {
		rev, err = es.PutTTL(ctx, callStoreKey(key), raw, rev, ttl)
	} else {
		rev, err = d.store.Put(ctx, callStoreKey(key), raw, rev)
	}
	if err != nil {
		return 0, fmt.Errorf("saga: call %s: recording it: %w", key, err)
	}
	return rev, nil
}

// remember keeps the outcome of the call key (made by step s at the
// record's revision rev) for the re-runs of the step, in memory; the step
// writes it to the store if it does not commit (see persistCalls).
func (d *Dispatcher) remember(s *stepState, key, name string, rev uint64, v any, err error) {
	o := callRecord{Saga: s.sagaName, ID: s.id, Name: name, Key: key, Step: s.identity, State: callDone, At: s.now.UTC(), value: v, rev: rev}
	if err != nil {
		o.State, o.Error = callFailed, err.Error()
	}
	d.calls.put(s.in, key, o)
	s.made = append(s.made, key)
}

// decodeOutcome returns the outcome o of a call as Call returns it.
func decodeOutcome[R any](s *stepState, name string, o callRecord) (R, error) {
	var r R
	if o.State == callFailed {
		return r, Permanent(fmt.Errorf("saga %s/%s: call %s failed in an earlier run of the step: %s", s.sagaName, s.id, name, o.Error))
	}
	if v, ok := o.value.(R); ok {
		return v, nil
	}
	data := []byte(o.Result)
	if len(data) == 0 {
		data = o.Bin
	}
	if len(data) > 0 {
		if err := s.codec.Unmarshal(data, &r); err != nil {
			return r, Permanent(fmt.Errorf("saga %s/%s: call %s: decoding its recorded result as %T: %w", s.sagaName, s.id, name, r, err))
		}
	}
	return r, nil
}

// persistCalls ends a run s of a step for the calls it made or found
// settled: a step that committed forgets their outcomes (its message is
// never run again); one that did not writes those not in the store yet,
// so that a delayed retry, here or in another process, finds them. Best
// effort: a run that finds only the intent follows the call's policy.
func (d *Dispatcher) persistCalls(s *stepState, committed bool) {
	if s == nil || len(s.made) == 0 {
		return
	}
	if committed {
		for _, key := range s.made {
			d.calls.forget(s.in, key)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.outerCtx()), 5*time.Second)
	defer cancel()
	for _, key := range s.made {
		o, ok := d.calls.get(s.in, key)
		if !ok || o.saved || o.rev == 0 {
			continue
		}
		if o.State == callDone {
			raw, err := s.codec.Marshal(o.value)
			if err != nil {
				continue
			}
			if json.Valid(raw) {
				o.Result = raw
			} else {
				o.Bin = raw
			}
		}
		rev, err := d.putCall(ctx, key, &o, o.rev, 0)
		if err != nil {
			d.cfg.logger.LogAttrs(ctx, slog.LevelDebug, "saga: recording a call's outcome failed", slog.String("key", key), slog.Any("error", err))
			continue
		}
		o.rev, o.saved = rev, true
		d.calls.put(s.in, key, o)
	}
}

// CallInDoubt is a call (see Call) whose outcome is unknown: its intent
// is recorded, no outcome is, and the step that made it has not
// committed — the process died mid-call, or the call failed with an error
// that left it unknown and the step is still being retried, or was
// dead-lettered (ErrCallInDoubt).
type CallInDoubt struct {
	Saga string    `json:"saga"`
	ID   string    `json:"id"`   // the instance's
	Name string    `json:"name"` // the call's, as the handler named it
	Key  string    `json:"key"`  // the idempotency key the provider got
	At   time.Time `json:"at"`   // when the first run recorded the intent
}

// CallsInDoubt lists the calls whose outcome is unknown (see CallInDoubt)
// and whose intent is older than olderThan (a call in flight now is not in
// doubt), for an operator to settle with the provider. It reads every
// record of a call, and the instance's record of each intent. A Store
// that cannot list its keys yields an error matching
// errors.ErrUnsupported.
func (d *Dispatcher) CallsInDoubt(ctx context.Context, olderThan time.Duration) iter.Seq2[CallInDoubt, error] {
	return func(yield func(CallInDoubt, error) bool) {
		ls, ok := d.store.(ListingStore)
		if !ok {
			yield(CallInDoubt{}, fmt.Errorf("saga: listing calls in doubt: the store (%T) cannot list its keys: %w", d.store, errors.ErrUnsupported))
			return
		}
		now := d.cfg.now()
		for key, err := range ls.ListKeys(ctx, CallKeyPrefix) {
			if err == nil {
				var c *callRecord
				if c, _, err = d.loadCall(ctx, strings.TrimPrefix(key, CallKeyPrefix)); err == nil && c != nil &&
					c.State == callIntent && now.Sub(c.At) >= olderThan {
					var done bool
					if done, err = d.stepCommitted(ctx, c); err == nil && !done {
						if !yield(CallInDoubt{Saga: c.Saga, ID: c.ID, Name: c.Name, Key: c.Key, At: c.At}, nil) {
							return
						}
					}
				}
			}
			if err != nil && !yield(CallInDoubt{}, err) {
				return
			}
		}
	}
}

// stepCommitted reports whether the step that made call c committed: the
// instance's inbox holds the identity of its message (or the instance is
// gone: completed, its tombstone expired).
func (d *Dispatcher) stepCommitted(ctx context.Context, c *callRecord) (bool, error) {
	rec, _, err := d.load(ctx, storeKey(c.Saga, c.ID))
	switch {
	case errors.Is(err, ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return c.Step != "" && rec.Seen(c.Step), nil
}

// callOutcomes keeps the outcomes of calls made by steps that have not
// committed yet, for their re-runs on the same delivery in this process
// (after a conflict, while an outage lasts), up to a bound. A delivery of
// the message again — after a crash, or as a delayed retry — is another
// message, and finds the outcome in the store, if at all, as another
// process would.
type callOutcomes struct {
	mu    sync.Mutex
	m     map[callMemKey]callRecord
	order []callMemKey
}

type callMemKey struct {
	in  *transport.Message
	key string
}

const maxCallOutcomes = 10000

func (c *callOutcomes) get(in *transport.Message, key string) (callRecord, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.m[callMemKey{in, key}]
	return o, ok
}

func (c *callOutcomes) put(in *transport.Message, key string, o callRecord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[callMemKey]callRecord{}
	}
	k := callMemKey{in, key}
	if _, ok := c.m[k]; !ok {
		c.order = append(c.order, k)
	}
	c.m[k] = o
	for len(c.m) > maxCallOutcomes && len(c.order) > 0 {
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
}

func (c *callOutcomes) forget(in *transport.Message, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, callMemKey{in, key})
	if len(c.order) > 2*len(c.m)+64 {
		kept := c.order[:0]
		for _, k := range c.order {
			if _, ok := c.m[k]; ok {
				kept = append(kept, k)
			}
		}
		c.order = kept
	}
}
