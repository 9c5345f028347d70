package saga_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
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

func TestRecurringTimeoutOnJetStream(t *testing.T) {
	t.Parallel()
	const occurrences = 10
	d := saga.Define[everyData]("recur-nats")
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
	qcfg := transport.QueueConfig{Name: "recur-nats"}
	n, q := queueOnNewServer(t, qcfg)
	disp := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(d))
	run(t, disp)
	if _, err := disp.Send(ctxFor(t), everyBegin{ID: "r"}); err != nil {
		t.Fatal(err)
	}
	want := make([]int, occurrences)
	for i := range want {
		want[i] = i + 1
	}
	testutil.Await(t, 40*time.Second, func() string {
		s, inst, ok := data[everyData](t, disp, "recur-nats", "r")
		if !ok || len(s.Fired) < occurrences || len(inst.Timeouts) != 0 {
			return fmt.Sprintf("handled %v, pending %+v; want %d occurrences handled, none pending", s.Fired, inst, occurrences)
		}
		return queueEmpty(t, q)
	})
	s, _, _ := data[everyData](t, disp, "recur-nats", "r")
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
