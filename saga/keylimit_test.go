package saga_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

type klStep struct{ Key, ID string }

// klProbe watches the steps of klSaga: how many run at once per key, the
// most ever, and which are done; steps of keys in gated wait for the
// gate.
type klProbe struct {
	mu       sync.Mutex
	inFlight map[string]int
	most     map[string]int
	done     map[string]int
	counts   []int // DeliveryCount of each step, from the StepDone hook
	gate     chan struct{}
	gated    map[string]bool
	slow     time.Duration // how long each step works
}

func newKLProbe(gated ...string) *klProbe {
	p := &klProbe{inFlight: map[string]int{}, most: map[string]int{}, done: map[string]int{}, gate: make(chan struct{}), gated: map[string]bool{}}
	for _, k := range gated {
		p.gated[k] = true
	}
	return p
}

// countHooks records the DeliveryCount of each step in p.counts.
func (p *klProbe) countHooks() saga.Hooks {
	return saga.Hooks{StepDone: func(_ context.Context, info saga.StepInfo, _ saga.StepResult) {
		p.mu.Lock()
		p.counts = append(p.counts, info.DeliveryCount)
		p.mu.Unlock()
	}}
}

func (p *klProbe) get(f func() int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return f()
}

func klSaga(name string, p *klProbe) *saga.Definition[struct{}] {
	d := saga.Define[struct{}](name)
	saga.StartedBy(d, saga.By(func(m klStep) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[struct{}], m klStep) error {
			p.mu.Lock()
			p.inFlight[m.Key]++
			p.most[m.Key] = max(p.most[m.Key], p.inFlight[m.Key])
			p.mu.Unlock()
			defer func() {
				p.mu.Lock()
				p.inFlight[m.Key]--
				p.done[m.Key]++
				p.mu.Unlock()
			}()
			if p.slow > 0 {
				select { // a step that works for a while
				case <-time.After(p.slow):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			if p.gated[m.Key] {
				select {
				case <-p.gate:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			c.MarkComplete()
			return nil
		})
	return d
}

// WithKeyLimit is work-conserving: with WithKeyLimit(2), a key alone
// runs more than two steps at once (its burst takes every concurrency
// slot, as without the option). Other keys' messages sent while its
// steps all wait are handled once they end, and so is the rest of its
// burst, each message once. (That the limit applies again as soon as
// another key's message waits is TestKeyLimiterWorkConserving's.)
func TestKeyLimit(t *testing.T) {
	t.Parallel()
	const (
		limit = 2
		conc  = 4
		hot   = 4 * conc // a batch of 4 for each worker
		cold  = 10
	)
	p := newKLProbe("hot")
	qcfg := transport.QueueConfig{Name: "keylimit"}
	n, _ := queueOnNewServer(t, qcfg)
	disp := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(klSaga("keylimit", p)), saga.WithQueueConfig(qcfg),
		saga.WithKeyLimit(limit), saga.WithConcurrency(conc), saga.WithReceiveBatch(4),
		saga.WithHooks(p.countHooks()))
	for i := range hot {
		if _, err := disp.Send(ctxFor(t), klStep{Key: "hot", ID: fmt.Sprint("hot-", i)}, saga.WithPartitionKey("hot")); err != nil {
			t.Fatal(err)
		}
	}
	run(t, disp)
	testutil.Await(t, 20*time.Second, func() string {
		if n := p.get(func() int { return p.inFlight["hot"] }); n < conc {
			return fmt.Sprintf("%d hot steps in flight at once, want %d (every slot): a key alone is not held to its limit of %d", n, conc, limit)
		}
		return ""
	})
	for i := range cold {
		key := fmt.Sprint("cold-", i)
		if _, err := disp.Send(ctxFor(t), klStep{Key: key, ID: key}, saga.WithPartitionKey(key)); err != nil {
			t.Fatal(err)
		}
	}
	close(p.gate)
	testutil.Await(t, 30*time.Second, func() string {
		p.mu.Lock()
		defer p.mu.Unlock()
		var left []string
		for i := range cold {
			if key := fmt.Sprint("cold-", i); p.done[key] != 1 {
				left = append(left, key)
			}
		}
		if len(left) > 0 || p.done["hot"] < hot {
			return fmt.Sprintf("cold keys not handled: %v; %d of %d hot steps done", left, p.done["hot"], hot)
		}
		return ""
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.most["hot"] != conc {
		t.Errorf("the hot key had up to %d steps in flight, want %d", p.most["hot"], conc)
	}
	if p.done["hot"] != hot {
		t.Errorf("%d hot steps done, want %d: each once", p.done["hot"], hot)
	}
	var again []string
	for i, c := range p.counts {
		if c != 1 {
			again = append(again, fmt.Sprintf("step %d: delivery %d", i, c))
		}
	}
	if len(again) > 0 {
		t.Errorf("messages delivered more than once: %s", strings.Join(again, ", "))
	}
}

// keyInPartition returns a key, prefix and a number, that a queue of n
// partitions puts in partition p (FNV-1a 64 of the key, modulo n), or,
// with not set, in any partition but p.
func keyInPartition(prefix string, p, n int, not bool) string {
	for i := 0; ; i++ {
		key := fmt.Sprint(prefix, "-", i)
		h := fnv.New64a()
		h.Write([]byte(key))
		if got := int(h.Sum64() % uint64(n)); (got == p) != not {
			return key
		}
	}
}

// On a queue of several partitions, a key's burst, another key's
// messages interleaved with it in its partition, and keys of the other
// partitions are each handled once, the burst's key never over the
// concurrency. (Which of its deliveries are set aside depends on how the
// receives split the partition's messages into batches: a worker that
// sees no other key's message waiting runs a hot step over the limit;
// that a full backlog then holds back only its partition is
// TestKeyLimiterPartitions'.)
func TestKeyLimitPartitioned(t *testing.T) {
	t.Parallel()
	const (
		parts = 4
		limit = 1
		conc  = 2
		hot   = 40 // well over the backlog, KeyLimitBacklog(2, 2) = 8
		cold  = 12
	)
	p := newKLProbe()
	hotKey := keyInPartition("hot", 0, parts, false)
	behind := keyInPartition("behind", 0, parts, false)
	p.gated[hotKey] = true
	qcfg := transport.QueueConfig{Name: "keylimit-parts", Partitions: parts}
	n, _ := queueOnNewServer(t, qcfg)
	disp := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(klSaga("keylimitparts", p)), saga.WithQueueConfig(qcfg),
		saga.WithKeyLimit(limit), saga.WithConcurrency(conc), saga.WithReceiveBatch(2),
		saga.WithHooks(p.countHooks()))
	for i := range hot {
		if _, err := disp.Send(ctxFor(t), klStep{Key: hotKey, ID: fmt.Sprint("hot-", i)}, saga.WithPartitionKey(hotKey)); err != nil {
			t.Fatal(err)
		}
		if _, err := disp.Send(ctxFor(t), klStep{Key: behind, ID: fmt.Sprint("behind-", i)}, saga.WithPartitionKey(behind)); err != nil {
			t.Fatal(err)
		}
	}
	run(t, disp)
	testutil.Await(t, 20*time.Second, func() string {
		if n := p.get(func() int { return p.inFlight[hotKey] }); n < limit {
			return fmt.Sprintf("%d hot steps in flight, want %d", n, limit)
		}
		return ""
	})
	for i := range cold {
		key := keyInPartition(fmt.Sprint("cold", i), 0, parts, true)
		if _, err := disp.Send(ctxFor(t), klStep{Key: key, ID: key}, saga.WithPartitionKey(key)); err != nil {
			t.Fatal(err)
		}
	}
	close(p.gate)
	testutil.Await(t, 30*time.Second, func() string {
		p.mu.Lock()
		defer p.mu.Unlock()
		done := 0
		for k, c := range p.done {
			if k != hotKey && k != behind {
				done += c
			}
		}
		if p.done[hotKey] != hot || p.done[behind] != hot || done != cold {
			return fmt.Sprintf("%d of %d hot steps done, %d of %d behind them, %d of %d of the other partitions", p.done[hotKey], hot, p.done[behind], hot, done, cold)
		}
		return ""
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.most[hotKey] > conc {
		t.Errorf("the hot key had up to %d steps in flight, more than the concurrency %d", p.most[hotKey], conc)
	}
	for i, c := range p.counts {
		if c != 1 {
			t.Errorf("step %d: delivery %d, want 1", i, c)
		}
	}
}

// Deliveries set aside for a key at its limit keep their locks: with a
// one-second lock, a burst of one key handled one step at a time, each
// step half the lock long, waits set aside for more than three locks,
// and no message is delivered twice. (Each batch of the two workers ends
// with another key's message, waiting behind the hot ones, so that the
// limit applies; a worker whose receive split that batch may still run a
// second hot step at once.)
func TestKeyLimitKeepsLocks(t *testing.T) {
	t.Parallel()
	const (
		burst = 16 // two batches of 8 and another key's message each
		lock  = time.Second
	)
	p := newKLProbe()
	p.slow = lock / 2
	qcfg := transport.QueueConfig{Name: "keylimit-lock", LockDuration: lock}
	n, _ := queueOnNewServer(t, qcfg)
	disp := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(klSaga("keylimit-lock", p)), saga.WithQueueConfig(qcfg),
		saga.WithKeyLimit(1), saga.WithConcurrency(2), saga.WithReceiveBatch(burst/2+1),
		saga.WithHooks(p.countHooks()))
	for i := range burst {
		if _, err := disp.Send(ctxFor(t), klStep{Key: "hot", ID: fmt.Sprint("hot-", i)}, saga.WithPartitionKey("hot")); err != nil {
			t.Fatal(err)
		}
		if i%(burst/2) == burst/2-1 {
			key := fmt.Sprint("other-", i)
			if _, err := disp.Send(ctxFor(t), klStep{Key: key, ID: key}, saga.WithPartitionKey(key)); err != nil {
				t.Fatal(err)
			}
		}
	}
	start := time.Now()
	run(t, disp)
	testutil.Await(t, 30*time.Second, func() string {
		if n := p.get(func() int { return len(p.counts) }); n < burst+2 {
			return fmt.Sprintf("%d of %d steps done", n, burst+2)
		}
		return ""
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	if took := time.Since(start); took < 3*lock {
		t.Fatalf("the burst took %v, less than three locks: the test proves nothing", took)
	}
	if p.most["hot"] > 2 {
		t.Errorf("up to %d steps in flight, more than the concurrency, 2", p.most["hot"])
	}
	if p.done["hot"] != burst || !slices.Equal(p.counts, slices.Repeat([]int{1}, burst+2)) {
		t.Errorf("%d hot steps done, delivery counts %v; want %d, and each of the %d messages delivered once", p.done["hot"], p.counts, burst, burst+2)
	}
}

func TestKeyLimitOption(t *testing.T) {
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, err = saga.NewDispatcher(b, memstore.New(), "q", saga.WithSagas(klSaga("keylimit-opt", newKLProbe())), saga.WithKeyLimit(-1))
	if !errors.Is(err, saga.ErrInvalidOption) || !strings.Contains(err.Error(), "key limit") {
		t.Errorf("WithKeyLimit(-1): %v, want ErrInvalidOption about the key limit", err)
	}
}

// batchStep is a step of batchSaga: it waits, up to a few seconds, until
// every step sent has started.
type batchStep struct{ ID string }

// With a key limit, the messages of one worker's batch run at once, each
// in a concurrency slot: on a partitioned queue a batch holds several
// tenants' messages, and one after the other the last of a batch waited
// for every step before it while slots were free (issue 47: 0.3–0.4 s on
// a replicated cluster). Two workers, two messages of two keys sent
// before Run: the first worker to receive takes both in one batch; each
// step waits for the other to start.
func TestKeyLimitBatchAtOnce(t *testing.T) {
	t.Parallel()
	const n = 2
	var (
		mu      sync.Mutex
		started int
		all     = make(chan struct{})
		alone   []string // steps that gave up waiting for the others
	)
	def := saga.Define[struct{}]("batch-at-once")
	saga.StartedBy(def, saga.By(func(m batchStep) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[struct{}], m batchStep) error {
			mu.Lock()
			if started++; started == n {
				close(all)
			}
			mu.Unlock()
			select {
			case <-all:
			case <-time.After(3 * time.Second):
				mu.Lock()
				alone = append(alone, m.ID)
				mu.Unlock()
			case <-ctx.Done():
				return ctx.Err()
			}
			c.MarkComplete()
			return nil
		})
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	d, err := saga.NewDispatcher(b, memstore.New(), "batch-at-once", saga.WithSagas(def), saga.WithLogger(testutil.Logger()),
		saga.WithKeyLimit(1), saga.WithConcurrency(n), saga.WithReceiveBatch(n))
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		key := fmt.Sprint("tenant-", i)
		if _, err := d.Send(ctxFor(t), batchStep{ID: key}, saga.WithPartitionKey(key)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.RunUntilCleanup(t, d.Run)
	testutil.Await(t, 20*time.Second, func() string {
		mu.Lock()
		defer mu.Unlock()
		if started < n {
			return fmt.Sprintf("%d of %d steps started", started, n)
		}
		return ""
	})
	mu.Lock()
	defer mu.Unlock()
	if len(alone) > 0 {
		t.Errorf("steps %v waited 3s for the other step of their batch to start: the batch ran one step after the other", alone)
	}
}
