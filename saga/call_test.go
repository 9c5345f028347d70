package saga_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

type (
	PayOrder struct{ Order string }
	Receipt  struct {
		Key string
		N   int // the provider's charge number
	}
	payment struct {
		Receipt Receipt
		Err     string
	}
)

// provider is a payment provider that honours idempotency keys, as
// Stripe does: a second charge with a key returns the first's receipt.
type provider struct {
	mu      sync.Mutex
	charged map[string]Receipt
	calls   map[string]int
	n       int
}

func newProvider() *provider {
	return &provider{charged: map[string]Receipt{}, calls: map[string]int{}}
}

func (p *provider) charge(key string) Receipt {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[key]++
	if r, ok := p.charged[key]; ok {
		return r
	}
	p.n++
	r := Receipt{Key: key, N: p.n}
	p.charged[key] = r
	return r
}

func (p *provider) lookup(key string) (Receipt, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.charged[key]
	return r, ok
}

func (p *provider) charges() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// countingStore counts the writes of each key prefix and can refuse the
// first commit of an instance as a conflict.
type countingStore struct {
	*memstore.Store
	mu       sync.Mutex
	puts     map[string]int // by the key's part before the first '.'
	conflict map[string]bool
}

func (s *countingStore) count(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, _, _ := strings.Cut(key, ".")
	s.puts[p]++
}

func (s *countingStore) refuse(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conflict[key] {
		delete(s.conflict, key)
		return true
	}
	return false
}

func (s *countingStore) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	s.count(key)
	if s.refuse(key) {
		return 0, fmt.Errorf("%w: %s: refused by the test", saga.ErrConflict, key)
	}
	return s.Store.Put(ctx, key, value, rev)
}

func (s *countingStore) PutTTL(ctx context.Context, key string, value []byte, rev uint64, ttl time.Duration) (uint64, error) {
	s.count(key)
	if s.refuse(key) {
		return 0, fmt.Errorf("%w: %s: refused by the test", saga.ErrConflict, key)
	}
	return s.Store.PutTTL(ctx, key, value, rev, ttl)
}

// paySaga charges each order once through Call with opts; failFirst, if
// set, makes the call's first run die after the provider charged (the
// answer lost: a panic, as a killed process, from the handler's side).
func paySaga(p *provider, runs *atomic.Int64, keys *sync.Map, failFirst bool, opts ...saga.CallOption) *saga.Definition[payment] {
	var died atomic.Bool
	def := saga.Define[payment]("pay")
	saga.StartedBy(def, saga.By(func(m PayOrder) string { return m.Order }),
		func(ctx context.Context, c *saga.Context[payment], m PayOrder) error {
			runs.Add(1)
			r, err := saga.Call(ctx, c, "charge", func(_ context.Context, key string) (Receipt, error) {
				keys.Store(key, true)
				r := p.charge(key)
				if failFirst && died.CompareAndSwap(false, true) {
					panic("the process died with the provider's answer on the wire")
				}
				return r, nil
			}, opts...)
			if err != nil {
				return err // ErrCallInDoubt too: dead-lettered as CallInDoubt
			}
			c.Data.Receipt = r
			return nil
		})
	return def
}

func payDispatcher(t *testing.T, store saga.Store, def saga.Saga, opts ...saga.Option) (*saga.Dispatcher, *transport.Queue) {
	t.Helper()
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	d, err := saga.NewDispatcher(b, store, "pay", append([]saga.Option{saga.WithSagas(def), saga.WithLogger(testutil.Logger()),
		saga.WithRetry(saga.RetryPolicy{Immediate: 0, Delayed: 3, Backoff: func(int) time.Duration { return 10 * time.Millisecond }})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	run(t, d)
	q, err := b.Queue(ctxFor(t), "pay")
	if err != nil {
		t.Fatal(err)
	}
	return d, q
}

func awaitReceipt(t *testing.T, d *saga.Dispatcher, id string) payment {
	t.Helper()
	var got payment
	testutil.Await(t, 10*time.Second, func() string {
		var ok bool
		got, _, ok = data[payment](t, d, "pay", id)
		if !ok || got.Receipt.Key == "" {
			return fmt.Sprintf("%s: no receipt yet (%+v)", id, got)
		}
		return ""
	})
	return got
}

// A step that conflicts after its call runs again: the handler runs twice,
// the call once, and the second run gets the first's receipt.
func TestCallOnceAcrossConflicts(t *testing.T) {
	t.Parallel()
	p := newProvider()
	var runs atomic.Int64
	var keys sync.Map
	store := &countingStore{Store: memstore.New(), puts: map[string]int{}, conflict: map[string]bool{saga.StoreKey("pay", "o1"): true}}
	d, _ := payDispatcher(t, store, paySaga(p, &runs, &keys, false))
	if _, err := d.Send(ctxFor(t), PayOrder{Order: "o1"}); err != nil {
		t.Fatal(err)
	}
	got := awaitReceipt(t, d, "o1")
	if runs.Load() < 2 {
		t.Fatalf("the handler ran %d times; the test's conflict did not happen", runs.Load())
	}
	if p.charges() != 1 || len(p.calls) != 1 || p.calls[got.Receipt.Key] != 1 {
		t.Errorf("%d charges, %d keys, %d calls with the receipt's key, after %d runs; want one call", p.charges(), len(p.calls), p.calls[got.Receipt.Key], runs.Load())
	}
	if got.Receipt != p.charged[got.Receipt.Key] {
		t.Errorf("receipt %+v, the provider's %+v", got.Receipt, p.charged[got.Receipt.Key])
	}
}

// A run that dies between the provider's charge and its answer leaves the
// call's intent without an outcome: the retry follows the call's policy.
func TestCallUnknownOutcome(t *testing.T) {
	t.Parallel()
	t.Run("retry with the same key", func(t *testing.T) {
		t.Parallel()
		p := newProvider()
		var runs atomic.Int64
		var keys sync.Map
		d, q := payDispatcher(t, memstore.New(), paySaga(p, &runs, &keys, true))
		if _, err := d.Send(ctxFor(t), PayOrder{Order: "o1"}); err != nil {
			t.Fatal(err)
		}
		got := awaitReceipt(t, d, "o1")
		n := 0
		keys.Range(func(any, any) bool { n++; return true })
		if p.charges() != 1 || n != 1 || p.calls[got.Receipt.Key] != 2 {
			t.Errorf("%d charges under %d keys, %d calls with the receipt's key; want 1 charge, 1 key, 2 calls", p.charges(), n, p.calls[got.Receipt.Key])
		}
		if dl := peekAll(t, q.DeadLetterQueue()); len(dl) > 0 {
			t.Errorf("dead-lettered: %s", dl[0].DeadLetterDescription)
		}
		for c, err := range d.CallsInDoubt(ctxFor(t), 0) {
			t.Errorf("a call of a committed step listed in doubt: %+v, %v", c, err)
		}
	})
	t.Run("retry with the same key on kvstore", func(t *testing.T) {
		t.Parallel()
		p := newProvider()
		var runs atomic.Int64
		var keys sync.Map
		n := newNode(t, startServer(t).ClientURL())
		d, _ := payDispatcher(t, n.store, paySaga(p, &runs, &keys, true))
		if _, err := d.Send(ctxFor(t), PayOrder{Order: "o1"}); err != nil {
			t.Fatal(err)
		}
		got := awaitReceipt(t, d, "o1")
		if p.charges() != 1 || p.calls[got.Receipt.Key] != 2 {
			t.Errorf("%d charges, %d calls with the receipt's key; want 1 charge, 2 calls", p.charges(), p.calls[got.Receipt.Key])
		}
	})
	t.Run("reconcile", func(t *testing.T) {
		t.Parallel()
		p := newProvider()
		var runs atomic.Int64
		var keys sync.Map
		var asked atomic.Int64
		def := paySaga(p, &runs, &keys, true, saga.ReconcileWith(func(_ context.Context, key string) (Receipt, bool, error) {
			asked.Add(1)
			r, ok := p.lookup(key)
			return r, ok, nil
		}))
		d, _ := payDispatcher(t, memstore.New(), def)
		if _, err := d.Send(ctxFor(t), PayOrder{Order: "o1"}); err != nil {
			t.Fatal(err)
		}
		got := awaitReceipt(t, d, "o1")
		if asked.Load() != 1 || p.calls[got.Receipt.Key] != 1 || p.charges() != 1 {
			t.Errorf("reconcile asked %d times, the provider called %d times, %d charges; want 1, 1, 1", asked.Load(), p.calls[got.Receipt.Key], p.charges())
		}
	})
	t.Run("at most once", func(t *testing.T) {
		t.Parallel()
		p := newProvider()
		var runs atomic.Int64
		var keys sync.Map
		d, q := payDispatcher(t, memstore.New(), paySaga(p, &runs, &keys, true, saga.AtMostOnce()))
		if _, err := d.Send(ctxFor(t), PayOrder{Order: "o1"}); err != nil {
			t.Fatal(err)
		}
		var dl []*transport.Message
		testutil.Await(t, 10*time.Second, func() string {
			if dl = peekAll(t, q.DeadLetterQueue()); len(dl) != 1 {
				return fmt.Sprintf("%d dead letters, want the one in doubt", len(dl))
			}
			return ""
		})
		if dl[0].DeadLetterReason != saga.ReasonCallInDoubt || !strings.Contains(dl[0].DeadLetterDescription, "AtMostOnce") {
			t.Errorf("dead letter %s: %s; want %s", dl[0].DeadLetterReason, dl[0].DeadLetterDescription, saga.ReasonCallInDoubt)
		}
		if p.charges() != 1 || len(p.calls) != 1 {
			t.Errorf("%d charges, %d keys; want the one call made before the crash", p.charges(), len(p.calls))
		}
		var doubts []saga.CallInDoubt
		for c, err := range d.CallsInDoubt(ctxFor(t), 0) {
			if err != nil {
				t.Fatal(err)
			}
			doubts = append(doubts, c)
		}
		if len(doubts) != 1 || doubts[0].Saga != "pay" || doubts[0].ID != "o1" || doubts[0].Name != "charge" || p.calls[doubts[0].Key] != 1 {
			t.Errorf("calls in doubt: %+v; want pay/o1's charge, under the key the provider got", doubts)
		}
		for c, err := range d.CallsInDoubt(ctxFor(t), time.Hour) {
			t.Errorf("in doubt for less than an hour, listed as older: %+v, %v", c, err)
		}
	})
}

// A call costs one store write (its intent); a step without one writes
// nothing more than before.
func TestCallWrites(t *testing.T) {
	t.Parallel()
	p := newProvider()
	var runs atomic.Int64
	var keys sync.Map
	store := &countingStore{Store: memstore.New(), puts: map[string]int{}}
	plain := saga.Define[payment]("plain")
	saga.StartedBy(plain, saga.By(func(m Incr) string { return m.ID }),
		func(context.Context, *saga.Context[payment], Incr) error { return nil })
	d, _ := payDispatcher(t, store, paySaga(p, &runs, &keys, false), saga.WithSagas(plain))
	if _, err := d.Send(ctxFor(t), PayOrder{Order: "o1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Send(ctxFor(t), Incr{ID: "i1"}); err != nil {
		t.Fatal(err)
	}
	awaitReceipt(t, d, "o1")
	testutil.Await(t, 10*time.Second, func() string {
		if _, _, ok := data[payment](t, d, "plain", "i1"); !ok {
			return "plain/i1 not stored yet"
		}
		return ""
	})
	store.mu.Lock()
	defer store.mu.Unlock()
	if store.puts["pay"] != store.puts["plain"] || store.puts["=call"] != 1 {
		t.Errorf("writes: %v; want as many of pay as of plain, and one call record", store.puts)
	}
}

// Bad names and options are Permanent errors matching ErrInvalidCall.
func TestCallInvalid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []saga.CallOption
	}{
		{"", nil}, {"a b", nil}, {"pay.>", nil}, {strings.Repeat("x", 65), nil}, {"ok", []saga.CallOption{saga.RetryWithin(0)}},
	} {
		var got error
		def := saga.Define[payment]("bad")
		saga.StartedBy(def, saga.By(func(m PayOrder) string { return m.Order }),
			func(ctx context.Context, c *saga.Context[payment], _ PayOrder) error {
				_, got = saga.Call(ctx, c, tc.name, func(context.Context, string) (int, error) {
					t.Error("called")
					return 0, nil
				}, tc.opts...)
				return got
			})
		d, q := payDispatcher(t, memstore.New(), def)
		if _, err := d.Send(ctxFor(t), PayOrder{Order: "o"}); err != nil {
			t.Fatal(err)
		}
		testutil.Await(t, 10*time.Second, func() string {
			if len(peekAll(t, q.DeadLetterQueue())) != 1 {
				return "not dead-lettered yet"
			}
			return ""
		})
		if !errors.Is(got, saga.ErrInvalidCall) || !errors.Is(got, saga.ErrPermanent) {
			t.Errorf("Call(%.20q, %d options): %v; want ErrInvalidCall, permanent", tc.name, len(tc.opts), got)
		}
	}
}
