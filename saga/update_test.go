package saga_test

// Operations outside the steps (update.go, admin.go): listing the
// scheduled timeouts and cancelling them, on their own and racing steps.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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
	qcfg := transport.QueueConfig{Name: "leak", LockDuration: 5 * time.Second}
	n, q := queueOnNewServer(t, qcfg)
	d := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(leakSaga()), saga.WithQueueConfig(qcfg),
		saga.WithConcurrency(8), saga.WithConflictRetries(100))
	// Not ctxFor's 10 s: 960 steps and 480 operator cancels take longer on
	// a loaded machine, and a cancel whose context ends after its commit
	// leaves its effects to a retry that the checks below do not wait for.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
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

func TestScheduledTimeoutsListAndCancel(t *testing.T) {
	t.Parallel()
	qcfg := transport.QueueConfig{Name: "admin", LockDuration: 2 * time.Second}
	n, q := queueOnNewServer(t, qcfg)
	var fired atomic.Int64
	var log stepLog
	d := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(remSaga(&fired), otherSaga()),
		saga.WithQueueConfig(qcfg), saga.WithHooks(log.hooks()), saga.WithConcurrency(1))
	ctx := ctxFor(t)
	rem := []string{"r-1", "r.*> 2", "r-3"}
	for _, id := range rem {
		if _, err := d.Send(ctx, RemStart{ID: id, After: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"o-1", "o-2"} {
		if _, err := d.Send(ctx, OtherStart{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	// A saga that cancels its own timeout before it is due: it is never
	// delivered. The probe, scheduled after the timeout's due time, is
	// handled after the timeout would have been (one worker, sequence
	// order), so once it is handled the timeout had its chance.
	// Due beyond the transport's cancel margin (500 ms), so that the
	// timeout is cancelled on the server, not merely dropped on arrival.
	if _, err := d.Send(ctx, RemStart{ID: "r-4", After: time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Send(ctx, RemCancel{ID: "r-4"}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Schedule(ctx, &transport.Message{Body: []byte(`{"ID":"r-4"}`),
		Properties: map[string]string{saga.TypeProperty: saga.MessageName[RemProbe]()}}, time.Now().Add(1800*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	run(t, d)

	list := func(sagaName string) map[string]saga.ScheduledTimeout {
		out := map[string]saga.ScheduledTimeout{}
		for st, err := range d.ScheduledTimeouts(ctx, sagaName) {
			if err != nil {
				t.Fatalf("ScheduledTimeouts(%q): %v", sagaName, err)
			}
			if _, dup := out[st.Saga+"/"+st.ID]; dup {
				t.Errorf("ScheduledTimeouts(%q): %s/%s listed twice", sagaName, st.Saga, st.ID)
			}
			out[st.Saga+"/"+st.ID] = st
		}
		return out
	}
	testutil.Await(t, 10*time.Second, func() string {
		if got := list(""); len(got) != 5 {
			return fmt.Sprintf("pending timeouts %v, want 5", keys(got))
		}
		return ""
	})
	reminders := list("reminder")
	if len(reminders) != 3 {
		t.Fatalf("reminder timeouts %v, want %v", keys(reminders), rem)
	}
	for _, id := range rem {
		st, ok := reminders["reminder/"+id]
		r, _, _ := data[remData](t, d, "reminder", id)
		switch {
		case !ok:
			t.Errorf("%q: not listed", id)
		case st.Type != saga.MessageName[RemDue]() || !st.At.Equal(r.Due) || !transport.IsScheduledSeq(st.Seq):
			t.Errorf("%q: listed as %+v, want type %s due %v with a scheduled seq", id, st, saga.MessageName[RemDue](), r.Due)
		}
	}
	if got := list("other"); len(got) != 2 || got["other/o-1"].Type != saga.MessageName[OtherDue]() {
		t.Errorf("other timeouts %v, want o-1 and o-2", got)
	}

	r2, _, _ := data[remData](t, d, "reminder", "r.*> 2")
	if res, err := d.CancelTimeouts(ctx, "reminder", "r.*> 2"); err != nil || len(res.Cancelled) != 1 ||
		res.Cancelled[0].Handle != r2.H || res.Cancelled[0].Type != saga.MessageName[RemDue]() || !res.Cancelled[0].At.Equal(r2.Due) {
		t.Fatalf("CancelTimeouts: got %+v, %v; want its one timeout %s due %v", res, err, r2.H, r2.Due)
	}
	if got := list("reminder"); len(got) != 2 || got["reminder/r.*> 2"].ID != "" {
		t.Errorf("after CancelTimeouts: reminder timeouts %v, want r-1 and r-3", keys(got))
	}
	if _, inst, _ := data[remData](t, d, "reminder", "r.*> 2"); len(inst.Timeouts) != 0 {
		t.Errorf("after CancelTimeouts: instance still waits for %+v", inst.Timeouts)
	}
	if res, err := d.CancelTimeouts(ctx, "reminder", "no-such"); !errors.Is(err, saga.ErrNotFound) || len(res.Cancelled) != 0 {
		t.Errorf("CancelTimeouts of a missing instance: got %+v, %v; want saga.ErrNotFound", res, err)
	}
	if res, err := d.CancelAllTimeouts(ctx, "reminder"); err != nil || len(res) != 2 ||
		res[0].ID != "r-1" || len(res[0].Cancelled) != 1 || res[1].ID != "r-3" || len(res[1].Cancelled) != 1 {
		t.Errorf("CancelAllTimeouts: got %+v, %v; want r-1 and r-3, one timeout each", res, err)
	}
	if got := list("reminder"); len(got) != 0 {
		t.Errorf("after CancelAllTimeouts: reminder timeouts %v, want none", keys(got))
	}
	if got := list("other"); len(got) != 2 {
		t.Errorf("after cancelling reminders: other timeouts %v, want o-1 and o-2 untouched", keys(got))
	}

	testutil.Await(t, 10*time.Second, func() string {
		if r, _, _ := data[remData](t, d, "reminder", "r-4"); r.Probes != 1 {
			return "probe not handled yet"
		}
		return ""
	})
	if n := fired.Load(); n != 0 {
		t.Errorf("reminder timeout handled %d times, want never: all were cancelled", n)
	}
	if ev := log.filter(saga.MessageName[RemDue]()); len(ev) != 0 {
		t.Errorf("cancelled timeouts delivered: %+v", ev)
	}
}

// cancelAfterPut is a store that, once armed, ends its caller's context
// right after it stores a record whose outbox cancels a timeout: as a
// caller that stops waiting between an update's commit and its effects.
type cancelAfterPut struct {
	saga.ExpiringStore
	mu     sync.Mutex
	cancel context.CancelFunc
}

func (s *cancelAfterPut) arm(cancel context.CancelFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancel = cancel
}

func (s *cancelAfterPut) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	rev, err := s.ExpiringStore.Put(ctx, key, value, rev)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.cancel != nil && bytes.Contains(value, []byte(`"kind":"cancel"`)) {
		s.cancel()
		s.cancel = nil
	}
	return rev, err
}

// TestCancelTimeoutsOutlivesItsCaller: an operator cancel whose caller's
// context ends right after its commit says the effects are pending and
// will be retried, and they are: the timeout's message is cancelled
// without another step of the instance.
func TestCancelTimeoutsOutlivesItsCaller(t *testing.T) {
	t.Parallel()
	qcfg := transport.QueueConfig{Name: "outlive", LockDuration: 2 * time.Second}
	n, _ := queueOnNewServer(t, qcfg)
	es, ok := n.store.(saga.ExpiringStore)
	if !ok {
		t.Fatalf("the test store %T is not an ExpiringStore", n.store)
	}
	store := &cancelAfterPut{ExpiringStore: es}
	d := n.dispatcher(t, store, qcfg.Name, saga.WithSagas(leakSaga()), saga.WithQueueConfig(qcfg), saga.WithRetry(fastRetry))
	ctx := ctxFor(t)
	if _, err := d.Send(ctx, LeakStart{ID: "o-1"}); err != nil {
		t.Fatal(err)
	}
	run(t, d)
	testutil.Await(t, 10*time.Second, func() string {
		if got := len(scheduledByID(t, d, "leak")["o-1"]); got != 1 {
			return fmt.Sprintf("%d timeouts scheduled, want the start step's", got)
		}
		return ""
	})

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	store.arm(cancel)
	res, err := d.CancelTimeouts(cctx, "leak", "o-1")
	if !errors.Is(err, saga.ErrEffectsPending) || !strings.Contains(err.Error(), "will be retried") || len(res.Cancelled) != 1 {
		t.Fatalf("CancelTimeouts with its context ended after the commit: %+v, %v; want the one timeout cancelled, effects pending and retried", res, err)
	}
	testutil.Await(t, 10*time.Second, func() string {
		if got := scheduledByID(t, d, "leak")["o-1"]; len(got) != 0 {
			return fmt.Sprintf("timeouts still scheduled: %v", got)
		}
		return ""
	})
	if _, inst, _ := data[leakData](t, d, "leak", "o-1"); len(inst.Timeouts) != 0 {
		t.Errorf("instance lists %v, want none", inst.Timeouts)
	}
}
