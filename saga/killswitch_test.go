package saga_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

type Mail struct{ ID string }

// With the kill switch on, a flood of ordinary failures (a mail server
// down, the handler saying only "error") trips it after its activity
// threshold: the later failing steps wait instead of being
// dead-lettered, and are handled once the mail server is back. Without
// it, every message is dead-lettered by its policy.
func TestKillSwitch(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("on=%v", on), func(t *testing.T) {
			b, err := transport.NewMemory()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			var down atomic.Bool
			down.Store(true)
			var mu sync.Mutex
			handled := map[string]bool{}
			def := saga.Define[struct{}]("mailer")
			saga.StartedBy(def, saga.By(func(m Mail) string { return m.ID }),
				func(_ context.Context, c *saga.Context[struct{}], m Mail) error {
					if down.Load() {
						return errors.New("smtp: connection refused")
					}
					mu.Lock()
					handled[m.ID] = true
					mu.Unlock()
					c.MarkComplete()
					return nil
				})
			opts := []saga.Option{saga.WithSagas(def), saga.WithRetry(saga.NoRetry), saga.WithLogger(testutil.Logger()), saga.WithConcurrency(2)}
			if on {
				opts = append(opts, saga.WithKillSwitch(saga.KillSwitch{ActivityThreshold: 5, TripThreshold: 0.5, Pause: time.Minute}))
			}
			d, err := saga.NewDispatcher(b, memstore.New(), "mail", opts...)
			if err != nil {
				t.Fatal(err)
			}
			run(t, d)
			const total = 30
			for i := range total {
				if _, err := d.Send(ctxFor(t), Mail{ID: fmt.Sprintf("m%02d", i)}); err != nil {
					t.Fatal(err)
				}
			}
			q, err := b.Queue(ctxFor(t), "mail")
			if err != nil {
				t.Fatal(err)
			}
			deadLetters := func() int { return len(peekAll(t, q.DeadLetterQueue())) }
			if !on {
				testutil.Await(t, 20*time.Second, func() string {
					if n := deadLetters(); n != total {
						return fmt.Sprintf("%d of %d dead-lettered without the kill switch", n, total)
					}
					return ""
				})
				return
			}
			testutil.Await(t, 20*time.Second, func() string {
				if h := d.Health(); !h.Waiting || h.Attempts < 5 {
					return fmt.Sprintf("the kill switch has not tripped: %+v", h)
				}
				return ""
			})
			dead := deadLetters()
			if dead > 5 {
				t.Errorf("%d dead-lettered before the switch tripped at 5 steps", dead)
			}
			down.Store(false)
			testutil.Await(t, 30*time.Second, func() string {
				mu.Lock()
				defer mu.Unlock()
				if len(handled)+dead != total {
					return fmt.Sprintf("%d handled and %d dead-lettered of %d", len(handled), dead, total)
				}
				return ""
			})
			if n := deadLetters(); n != dead {
				t.Errorf("%d dead letters after the pause, %d before", n, dead)
			}
		})
	}
}
