package saga_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// The catch-up policies on a real nats-server, stopped past its timeouts'
// due time for longer than their tolerance: after the restart, each
// timeout type is handled by its policy. The policy is applied by the
// dispatcher as it handles a timeout's message, which every engine
// delivers the same way (the Temporal engine too: its workflow delivers
// the same message to the same queue), so this test on the transport
// engine covers the decision; the engines differ only in how late the
// message arrives.

type (
	ncBegin    struct{ ID string }
	ncFire     struct{}
	ncSkip     struct{}
	ncCoalesce struct{ N int }
	ncLate     struct{}
	ncData     struct{ Fired []string }
)

func (ncFire) MessageName() string     { return "nc.fire" }
func (ncSkip) MessageName() string     { return "nc.skip" }
func (ncCoalesce) MessageName() string { return "nc.coalesce" }
func (ncLate) MessageName() string     { return "nc.late" }

const (
	ncDue       = 2 * time.Second // after the starting step
	ncTolerance = 500 * time.Millisecond
)

func ncSaga() *saga.Definition[ncData] {
	d := saga.Define[ncData]("catchup-nats")
	saga.StartedBy(d, saga.By(func(m ncBegin) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[ncData], m ncBegin) error {
			for _, p := range []any{ncFire{}, ncSkip{}, ncCoalesce{1}, ncLate{}} {
				if _, err := c.RequestTimeout(ncDue, p); err != nil {
					return err
				}
			}
			_, err := c.RequestTimeout(ncDue+200*time.Millisecond, ncCoalesce{2})
			return err
		})
	fired := func(c *saga.Context[ncData], what string) error {
		c.Data.Fired = append(c.Data.Fired, what)
		return nil
	}
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[ncData], _ ncFire) error { return fired(c, "fire") },
		saga.CatchUp(saga.CatchUpFire, ncTolerance))
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[ncData], _ ncSkip) error { return fired(c, "skip") },
		saga.CatchUp(saga.CatchUpSkip, ncTolerance))
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[ncData], m ncCoalesce) error {
		return fired(c, fmt.Sprintf("coalesce%d", m.N))
	}, saga.CatchUp(saga.CatchUpCoalesce, ncTolerance))
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[ncData], _ ncLate) error { return fired(c, "late") },
		saga.HandleLate(ncTolerance, func(ctx context.Context, c *saga.Context[ncData], _ ncLate, l saga.Lateness) error {
			if l.Late <= l.Tolerance {
				return fmt.Errorf("late handler told %v late, within the tolerance %v", l.Late, l.Tolerance)
			}
			return fired(c, "late-handler")
		}))
	return d
}

func TestCatchUpPoliciesAfterServerOutage(t *testing.T) {
	t.Parallel()
	p, err := embedded.StartProcess(embedded.Options{ReadyTimeout: testutil.ServerReady})
	if err != nil {
		t.Fatalf("start nats-server in a child process: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	n := newNode(t, p.ClientURL())
	qcfg := transport.QueueConfig{Name: "catchup-nats"}
	n.openQueue(t, qcfg)
	log := &stepLog{}
	var mu sync.Mutex
	var lates []saga.LateTimeout
	d := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(ncSaga()), saga.WithHooks(log.hooks()),
		saga.WithHooks(saga.Hooks{TimeoutLate: func(_ context.Context, l saga.LateTimeout) {
			mu.Lock()
			lates = append(lates, l)
			mu.Unlock()
		}}))
	run(t, d)
	if _, err := d.Send(ctxFor(t), ncBegin{ID: "i"}); err != nil {
		t.Fatal(err)
	}
	// Wait until the five timeouts are scheduled on the server.
	var last time.Time
	testutil.Await(t, 20*time.Second, func() string {
		n := 0
		for st, err := range d.ScheduledTimeouts(ctxFor(t), "catchup-nats") {
			if err != nil {
				return err.Error()
			}
			n++
			last = st.At
		}
		if n != 5 {
			return fmt.Sprintf("%d timeouts scheduled, want 5", n)
		}
		return ""
	})
	if time.Until(last) < ncDue/2 {
		t.Fatalf("the timeouts were scheduled too late to stop the server before they are due (the last due in %v)", time.Until(last))
	}
	if err := p.Stop(); err != nil {
		t.Logf("stop: %v", err)
	}
	// Down until every timeout is overdue by more than its tolerance.
	testutil.AwaitTrue(t, 10*time.Second, "the timeouts overdue beyond their tolerance", func() bool {
		return time.Now().After(last.Add(ncTolerance + 300*time.Millisecond))
	})
	if err := p.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	testutil.Await(t, 30*time.Second, func() string {
		s, inst, ok := data[ncData](t, d, "catchup-nats", "i")
		if !ok || len(inst.Timeouts) > 0 {
			return fmt.Sprintf("instance: %v, fired %q, still pending %+v", ok, s.Fired, inst.Timeouts)
		}
		return ""
	})
	s, _, _ := data[ncData](t, d, "catchup-nats", "i")
	slices.Sort(s.Fired)
	if want := []string{"coalesce2", "fire", "late-handler"}; !slices.Equal(s.Fired, want) {
		t.Errorf("handled %q, want %q", s.Fired, want)
	}
	mu.Lock()
	defer mu.Unlock()
	// Which of the two coalescing timeouts is handled first depends on
	// delivery order (both are overdue on arrival): the earlier one skips
	// itself if it comes first and sees the later one overdue, or the
	// later one, handled first, cancels it (Coalesced). Either way the
	// earlier one goes exactly once.
	got := map[string]bool{}
	coalesceSkipped, coalesced := 0, 0
	for _, l := range lates {
		got[fmt.Sprintf("%s/%s/skipped=%v", l.Type, l.Policy, l.Skipped)] = true
		if l.Type == "nc.coalesce" {
			if l.Skipped {
				coalesceSkipped++
			} else {
				coalesced += l.Coalesced
			}
		}
	}
	for _, want := range []string{"nc.fire/fire/skipped=false", "nc.skip/skip/skipped=true", "nc.late/late/skipped=false", "nc.coalesce/coalesce/skipped=false"} {
		if !got[want] {
			t.Errorf("TimeoutLate reported %v; want %s among them", got, want)
		}
	}
	if coalesceSkipped+coalesced != 1 {
		t.Errorf("the earlier coalescing timeout: skipped itself %d times, cancelled by the later one %d times; want once in all",
			coalesceSkipped, coalesced)
	}
	skipped := 0
	for _, e := range log.filter("") {
		if e.Result.Outcome == saga.Skipped {
			skipped++
		}
	}
	if want := 1 + coalesceSkipped; skipped != want {
		t.Errorf("%d steps Skipped, want %d (nc.skip, and the earlier nc.coalesce if it came first)", skipped, want)
	}
}
