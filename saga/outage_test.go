package saga_test

import (
	"context"
	"errors"
	"fmt"
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

type Charge struct{ ID string }

type Broken struct{ ID string }

// A handler whose dependency is down returns an error wrapping
// saga.ErrUnavailable: its messages wait — none dead-lettered even under
// a policy with no retries at all, none redelivered (each is handled on
// its first delivery), no new message received while they wait — and
// are all handled once the dependency is back. A message whose handler
// fails with an ordinary error is still dead-lettered by its policy.
func TestUnavailableDependencyWaitsInsteadOfDeadLettering(t *testing.T) {
	t.Parallel()
	// A lock shorter than the outage: the waiting steps must renew it.
	qcfg := transport.QueueConfig{Name: "outage", LockDuration: 2 * time.Second, MaxDeliveryCount: 2}
	n, q := queueOnNewServer(t, qcfg)

	var down atomic.Bool
	down.Store(true)
	var mu sync.Mutex
	tried := map[string]bool{}   // messages whose step ran while down
	handled := map[string]int{}  // commits per instance
	counts := map[string][]int{} // delivery counts seen per instance
	def := saga.Define[counter]("outage")
	saga.StartedBy(def, saga.By(func(m Charge) string { return m.ID }),
		func(_ context.Context, c *saga.Context[counter], m Charge) error {
			mu.Lock()
			defer mu.Unlock()
			if down.Load() {
				tried[m.ID] = true
				return fmt.Errorf("payments API: %w", saga.ErrUnavailable)
			}
			c.Data.Count++
			handled[m.ID]++
			return nil
		})
	saga.StartedBy(def, saga.By(func(m Broken) string { return m.ID }),
		func(context.Context, *saga.Context[counter], Broken) error { return errors.New("bad card number") })
	var outcomes sync.Map // instance → []saga.Outcome
	hooks := saga.Hooks{StepDone: func(_ context.Context, info saga.StepInfo, res saga.StepResult) {
		mu.Lock()
		defer mu.Unlock()
		counts[info.ID] = append(counts[info.ID], info.DeliveryCount)
		if res.Outcome == saga.Waiting && !errors.Is(res.Err, saga.ErrUnavailable) {
			t.Errorf("%s: outcome waiting with %v", info.ID, res.Err)
		}
		prev, _ := outcomes.Load(info.ID)
		list, _ := prev.([]saga.Outcome)
		outcomes.Store(info.ID, append(list, res.Outcome))
	}}
	d := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(def), saga.WithQueueConfig(qcfg),
		saga.WithRetry(saga.NoRetry), saga.WithConcurrency(2), saga.WithHooks(hooks))
	ctx := ctxFor(t)
	const total = 12
	for i := range total {
		if _, err := d.Send(ctx, Charge{ID: fmt.Sprintf("c%02d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	run(t, d)

	// The outage lasts several lock durations and many attempts — and
	// less than the 10 s for which the transport keeps, renewing their
	// locks, the messages a pull brought after its Receive returned
	// (docs/guarantees.md, "Slow links lose nothing"): those come back
	// once with their delivery count one higher after a longer outage
	// (docs/guarantees.md, "Outages").
	testutil.Await(t, 30*time.Second, func() string {
		h := d.Health()
		if !h.Waiting || !errors.Is(h.Err, saga.ErrUnavailable) || h.Since.IsZero() {
			return fmt.Sprintf("Health %+v: not waiting for the dependency", h)
		}
		if h.Attempts < 8 || time.Since(h.Since) < 3*qcfg.LockDuration {
			return fmt.Sprintf("%d attempts over %v", h.Attempts, time.Since(h.Since))
		}
		return ""
	})
	// A message whose handler fails for its own reason still dead-letters
	// by its policy (none here), outage or not.
	if _, err := d.Send(ctxFor(t), Broken{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	triedWhileDown := len(tried)
	mu.Unlock()
	if dl := peekAll(t, q.DeadLetterQueue()); len(dl) != 0 {
		t.Fatalf("%d messages dead-lettered during the outage: %s %s", len(dl), dl[0].DeadLetterReason, dl[0].DeadLetterDescription)
	}
	// Nothing new was received while steps waited: at most the two
	// slots' messages and the one batch received as the outage began.
	if triedWhileDown > 2+8 {
		t.Errorf("%d messages ran their step during the outage: receiving did not pause", triedWhileDown)
	}

	down.Store(false)
	testutil.Await(t, 60*time.Second, func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(handled) != total {
			return fmt.Sprintf("%d of %d instances handled after the outage", len(handled), total)
		}
		return ""
	})
	testutil.Await(t, 30*time.Second, func() string {
		dl := peekAll(t, q.DeadLetterQueue())
		if len(dl) != 1 {
			return fmt.Sprintf("%d dead letters, want the broken message's only", len(dl))
		}
		if dl[0].DeadLetterReason != saga.ReasonRetriesExhausted || !strings.Contains(dl[0].DeadLetterDescription, "bad card number") {
			return "dead letter " + dl[0].DeadLetterReason + ": " + dl[0].DeadLetterDescription
		}
		return ""
	})
	mu.Lock()
	defer mu.Unlock()
	for id, n := range handled {
		if n != 1 {
			t.Errorf("%s handled %d times", id, n)
		}
		if o, _ := outcomes.Load(id); tried[id] && !slices.Contains(o.([]saga.Outcome), saga.Waiting) {
			t.Errorf("%s: outcomes %v: the steps of the outage not reported as waiting", id, o)
		}
		for _, c := range counts[id] {
			if c != 1 {
				t.Errorf("%s: a step saw DeliveryCount %d (counts %v): the outage spent a delivery", id, c, counts[id])
				break
			}
		}
	}
	if h := d.Health(); h.Waiting {
		t.Errorf("Health after the outage: %+v", h)
	}
}
