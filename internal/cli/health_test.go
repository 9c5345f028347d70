package cli

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
)

type Pay struct{ ID string }

// A dispatcher waiting out an outage says so where operators look:
// `jetsaga queues show` lists it waiting, since when, with its attempts
// and the last error, and the console's overview says it in the queue's
// row; both say "running" once the dependency is back.
func TestWaitingDispatcherShown(t *testing.T) {
	w := startWorkload(t, nil, false)
	var down atomic.Bool
	down.Store(true)
	def := saga.Define[struct{}]("payer")
	saga.StartedBy(def, saga.By(func(m Pay) string { return m.ID }),
		func(context.Context, *saga.Context[struct{}], Pay) error {
			if down.Load() {
				return fmt.Errorf("card API: %w", saga.ErrUnavailable)
			}
			return nil
		})
	d := w.dispatcher("payments", saga.WithSagas(def))
	if _, err := d.Send(t.Context(), Pay{ID: "p1"}); err != nil {
		t.Fatal(err)
	}
	testutil.Await(t, 30*time.Second, func() string {
		v := jsonOf[QueueShow](w, 0, "queues", "show", "payments")
		if len(v.Dispatchers) != 1 {
			return fmt.Sprintf("%d dispatchers listed, want 1", len(v.Dispatchers))
		}
		if h := v.Dispatchers[0]; !h.Waiting || h.Attempts < 1 || h.Since.IsZero() || !strings.Contains(h.Error, "card API") {
			return fmt.Sprintf("dispatcher %+v: not shown waiting for the card API", h)
		}
		return ""
	})
	if r := w.run("queues", "show", "payments"); r.code != 0 || !strings.Contains(r.stdout, "waiting for a dependency since") {
		t.Errorf("queues show payments: %+v", r)
	}
	srv := w.console("", false)
	if code, body := get(t, client(t), srv.URL+"/"); code != 200 || !strings.Contains(body, "1 running; waiting for a dependency since") {
		t.Errorf("console overview: %d, no waiting dispatcher on payments:\n%s", code, body)
	}
	down.Store(false)
	testutil.Await(t, 30*time.Second, func() string {
		v := jsonOf[QueueShow](w, 0, "queues", "show", "payments")
		if len(v.Dispatchers) != 1 || v.Dispatchers[0].Waiting {
			return fmt.Sprintf("dispatchers %+v: still waiting after the card API came back", v.Dispatchers)
		}
		return ""
	})
	if _, body := get(t, client(t), srv.URL+"/"); !strings.Contains(body, "1 running") || strings.Contains(body, "waiting for a dependency") {
		t.Errorf("console overview after the outage:\n%s", body)
	}
}
