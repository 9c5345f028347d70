package saga_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// A recurring timeout every second for ten seconds on a real nats-server:
// each occurrence is handled once, none early, on its one-second grid,
// and cancelling it in the tenth occurrence's handler ends the series.

type (
	everyBegin struct{ ID string }
	everyTick  struct{}
	everyData  struct {
		First time.Time // the first occurrence's due time
		Fired []int
		Dues  []time.Time
		Early []string
	}
)

func (everyTick) MessageName() string { return "every.tick" }

// everySaga: a recurring timeout every second, cancelled by the handler
// of its occurrences-th occurrence.
func everySaga(name string, occurrences int) *saga.Definition[everyData] {
	d := saga.Define[everyData](name)
	saga.StartedBy(d, saga.By(func(m everyBegin) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[everyData], m everyBegin) error {
			p, err := c.RequestRecurringTimeout(time.Second, everyTick{})
			c.Data.First = p.At
			return err
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[everyData], _ everyTick) error {
		n := c.Occurrence()
		c.Data.Fired = append(c.Data.Fired, n)
		c.Data.Dues = append(c.Data.Dues, c.TimeoutDue())
		if early := timeoutTooEarly(c, c.Data.First.Add(time.Duration(n-1)*time.Second)); early != "" {
			c.Data.Early = append(c.Data.Early, fmt.Sprintf("%d: %s", n, early))
		}
		if n == occurrences {
			c.CancelTimeout(c.Timeout())
		}
		return nil
	})
	return d
}

// checkEvery checks the instance id of everySaga: occurrences 1 to n
// handled once each, in order, on the grid, none early.
func checkEvery(t *testing.T, disp *saga.Dispatcher, name, id string, n int) {
	t.Helper()
	s, _, _ := data[everyData](t, disp, name, id)
	want := make([]int, n)
	for i := range want {
		want[i] = i + 1
	}
	if !slices.Equal(s.Fired, want) {
		t.Errorf("occurrences handled %v, want %v: each once, in order", s.Fired, want)
	}
	for i, due := range s.Dues {
		if w := s.First.Add(time.Duration(i) * time.Second); !due.Equal(w) {
			t.Errorf("occurrence %d due %v, want %v (on the grid from the first)", i+1, due, w)
		}
	}
	if len(s.Early) > 0 {
		t.Errorf("occurrences seen early: %q", s.Early)
	}
}

func TestRecurringTimeoutOnJetStream(t *testing.T) {
	t.Parallel()
	const occurrences = 10
	d := everySaga("recur-nats", occurrences)
	qcfg := transport.QueueConfig{Name: "recur-nats"}
	n, q := queueOnNewServer(t, qcfg)
	disp := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(d))
	run(t, disp)
	if _, err := disp.Send(ctxFor(t), everyBegin{ID: "r"}); err != nil {
		t.Fatal(err)
	}
	testutil.Await(t, 40*time.Second, func() string {
		s, inst, ok := data[everyData](t, disp, "recur-nats", "r")
		if !ok || len(s.Fired) < occurrences || len(inst.Timeouts) != 0 {
			return fmt.Sprintf("handled %v, pending %+v; want %d occurrences handled, none pending", s.Fired, inst, occurrences)
		}
		return queueEmpty(t, q)
	})
	checkEvery(t, disp, "recur-nats", "r", occurrences)
}

// pendingOccurrence returns the number of the occurrence an encoded
// record holds pending (0 if none), and whether it has an outbox.
func pendingOccurrence(value []byte) (int, bool) {
	var rec struct {
		Timeouts map[string]struct {
			Occurrence int `json:"occurrence"`
		} `json:"timeouts"`
	}
	if err := json.Unmarshal(value, &rec); err != nil {
		panic(fmt.Sprintf("test: saga record is not JSON: %v", err))
	}
	n := 0
	for _, te := range rec.Timeouts {
		n = max(n, te.Occurrence)
	}
	return n, hasOutbox(value)
}

// A dispatcher that dies in the step of the second occurrence — before
// its commit, after it, or after scheduling the third — and another that
// takes over: every occurrence is handled once, none is lost.
func TestRecurringTimeoutCrashInItsStep(t *testing.T) {
	t.Parallel()
	const occurrences = 5
	third := func(_ string, v []byte) bool { n, out := pendingOccurrence(v); return n == 3 && out }
	cases := []struct {
		name  string
		put   putFault
		sched bool // crash right after the third occurrence is scheduled
	}{
		{name: "before the commit", put: func(k string, v []byte) (bool, bool) { return third(k, v), false }},
		{name: "after the commit, before the next is scheduled", put: func(k string, v []byte) (bool, bool) { return false, third(k, v) }},
		{name: "after the next is scheduled", sched: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := everySaga("recur-crash", occurrences)
			srv := startServer(t)
			qcfg := transport.QueueConfig{Name: "recur-crash", LockDuration: time.Second}
			opts := []saga.Option{saga.WithSagas(d), saga.WithQueueConfig(qcfg), saga.WithRetry(fastRetry)}
			obs := newNode(t, srv.ClientURL())
			q := obs.openQueue(t, qcfg)

			a := newNode(t, srv.ClientURL())
			c := newCrasher(a.nc)
			sched := &crashScheduler{inner: timeout.NewQueue(a.broker), c: c}
			if tc.sched {
				var n atomic.Int64
				sched.afterSchedule = func(timeout.Timeout) bool { return n.Add(1) == 3 }
			}
			da := a.dispatcher(t, &crashStore{Store: a.store, c: c, fault: tc.put}, qcfg.Name, append(opts, saga.WithTimeouts(sched))...)
			if _, err := da.Send(t.Context(), everyBegin{ID: "c"}); err != nil {
				t.Fatal(err)
			}
			ra := runCrashing(t, da)
			select {
			case <-c.done:
			case <-time.After(20 * time.Second):
				t.Fatal("dispatcher A never reached the crash point")
			}
			ra.cancel()

			b := newNode(t, srv.ClientURL())
			db := b.dispatcher(t, nil, qcfg.Name, opts...)
			run(t, db)
			testutil.Await(t, 30*time.Second, func() string {
				s, inst, ok := data[everyData](t, db, "recur-crash", "c")
				if !ok || len(s.Fired) < occurrences || len(inst.Timeouts) != 0 {
					return fmt.Sprintf("handled %v, pending %+v; want %d occurrences handled, none pending", s.Fired, inst, occurrences)
				}
				return queueEmpty(t, q)
			})
			checkEvery(t, db, "recur-crash", "c", occurrences)
			if dl := peekAll(t, q.DeadLetterQueue()); len(dl) > 0 {
				t.Errorf("%d messages dead-lettered, first: %s: %s", len(dl), dl[0].DeadLetterReason, dl[0].DeadLetterDescription)
			}
		})
	}
}
