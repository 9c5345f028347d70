package saga_test

// Tests of the issues fixed after the first release: operator cancels as
// steps, truthful dead letters and outcomes, classification of handler
// requests, tombstone retention, and what hooks and handlers can see.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// Operator cancels racing handler steps.

type LeakStart struct{ ID string }

type LeakBump struct {
	ID string
	N  int
}

type LeakDue struct{ N int }

type leakData struct{ Bumps int }

func leakSaga() *saga.Definition[leakData] {
	d := saga.Define[leakData]("leak")
	saga.StartedBy(d, saga.By(func(m LeakStart) string { return m.ID }),
		func(_ context.Context, c *saga.Context[leakData], _ LeakStart) error {
			_, err := c.RequestTimeout(time.Hour, LeakDue{})
			return err
		})
	saga.Handles(d, saga.By(func(m LeakBump) string { return m.ID }),
		func(_ context.Context, c *saga.Context[leakData], m LeakBump) error {
			c.Data.Bumps++
			_, err := c.RequestTimeout(time.Hour+time.Duration(m.N)*time.Millisecond, LeakDue{N: m.N})
			return err
		})
	saga.OnTimeout(d, func(context.Context, *saga.Context[leakData], LeakDue) error { return nil })
	return d
}

// sameTimes compares two lists of due times as sets.
func sameTimes(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	key := func(ts []time.Time) []int64 {
		out := make([]int64, len(ts))
		for i, t := range ts {
			out[i] = t.UnixNano()
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(key(a), key(b))
}

// TestOperatorCancelRacingSteps: CancelTimeouts racing steps that request
// timeouts must never leave a timeout scheduled that the instance no
// longer lists, and what it reports cancelled must be what was.
func TestOperatorCancelRacingSteps(t *testing.T) {
	t.Parallel()
	const (
		instances = 240
		bumps     = 3
		operators = 4
	)
	srv := startServer(t)
	n := newNode(t, srv.ClientURL())
	qcfg := transport.QueueConfig{Name: "leak", LockDuration: 5 * time.Second}
	q := n.openQueue(t, qcfg)
	d := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(leakSaga()), saga.WithQueueConfig(qcfg),
		saga.WithConcurrency(8), saga.WithConflictRetries(100))
	ctx := ctxFor(t)
	id := func(i int) string { return fmt.Sprintf("l-%d", i) }
	for i := range instances {
		if _, err := d.Send(ctx, LeakStart{ID: id(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for b := range bumps {
		for i := range instances {
			if _, err := d.Send(ctx, LeakBump{ID: id(i), N: b + 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	run(t, d)

	// Operators cancel every instance's timeouts twice each, at random
	// moments while the bumps are being handled.
	var cancelled atomic.Int64
	var wg sync.WaitGroup
	var errs sync.Map
	for o := range operators {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(o), 42))
			for round := range 2 {
				for _, i := range rng.Perm(instances) {
					if i%operators != o {
						continue
					}
					for {
						res, err := d.CancelTimeouts(ctx, "leak", id(i))
						if errors.Is(err, saga.ErrNotFound) {
							time.Sleep(time.Millisecond) // not started yet
							continue
						}
						if err != nil {
							errs.Store(fmt.Sprintf("%s round %d", id(i), round), err)
						}
						cancelled.Add(int64(len(res.Cancelled)))
						break
					}
				}
			}
		})
	}
	wg.Wait()
	errs.Range(func(k, v any) bool {
		t.Errorf("CancelTimeouts %s: %v", k, v)
		return true
	})
	testutil.Await(t, 60*time.Second, func() string {
		for i := range instances {
			if l, _, _ := data[leakData](t, d, "leak", id(i)); l.Bumps != bumps {
				return fmt.Sprintf("%s: %d of %d bumps handled", id(i), l.Bumps, bumps)
			}
		}
		for _, m := range peekAll(t, q) {
			if m.State == transport.Active {
				return fmt.Sprintf("message seq %d still in the queue", m.Seq)
			}
		}
		return ""
	})
	sched := scheduledByID(t, d, "leak")
	pending, leaked := 0, 0
	for i := range instances {
		_, inst, _ := data[leakData](t, d, "leak", id(i))
		var listed []time.Time
		for _, pt := range inst.Timeouts {
			listed = append(listed, pt.At)
		}
		pending += len(listed)
		if !sameTimes(listed, sched[id(i)]) {
			leaked += max(0, len(sched[id(i)])-len(listed))
			t.Errorf("%s: instance lists timeouts due %v, queue holds %v", id(i), listed, sched[id(i)])
		}
	}
	if leaked > 0 {
		t.Errorf("%d timeouts leaked: scheduled, and listed by no instance", leaked)
	}
	if got, want := cancelled.Load()+int64(pending), int64(instances*(1+bumps)); got != want {
		t.Errorf("reported cancelled %d + still pending %d = %d, want every timeout requested (%d)",
			cancelled.Load(), pending, got, want)
	}
	t.Logf("%d timeouts cancelled, %d pending", cancelled.Load(), pending)
}

// What hooks see.

type SeeStart struct{ ID string }

type SeeDue struct{}

func TestStepStartedKnowsSagaAndID(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	n := newNode(t, srv.ClientURL())
	qcfg := transport.QueueConfig{Name: "see", LockDuration: 2 * time.Second}
	q := n.openQueue(t, qcfg)
	def := saga.Define[counter]("see")
	saga.StartedBy(def, saga.By(func(m SeeStart) string { return m.ID }),
		func(_ context.Context, c *saga.Context[counter], _ SeeStart) error {
			_, err := c.RequestTimeout(100*time.Millisecond, SeeDue{})
			return err
		})
	saga.OnTimeout(def, func(_ context.Context, c *saga.Context[counter], _ SeeDue) error {
		c.MarkComplete()
		return nil
	})
	var mu sync.Mutex
	started := map[string]saga.StepInfo{}
	var log stepLog
	hooks := log.hooks()
	hooks.StepStarted = func(ctx context.Context, info saga.StepInfo) context.Context {
		mu.Lock()
		started[info.MessageType] = info
		mu.Unlock()
		return ctx
	}
	d := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(def), saga.WithQueueConfig(qcfg), saga.WithHooks(hooks))
	if _, err := d.Send(ctxFor(t), SeeStart{ID: "s.1"}); err != nil {
		t.Fatal(err)
	}
	run(t, d)
	testutil.Await(t, 10*time.Second, func() string {
		if len(log.filter(saga.MessageName[SeeDue]())) == 0 {
			return "timeout not handled yet"
		}
		return queueEmpty(t, q)
	})
	mu.Lock()
	defer mu.Unlock()
	for _, typ := range []string{saga.MessageName[SeeStart](), saga.MessageName[SeeDue]()} {
		if info := started[typ]; info.Saga != "see" || info.ID != "s.1" {
			t.Errorf("StepStarted for %s: %+v, want saga see, ID s.1", typ, info)
		}
	}
}
