package saga_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

type LongStart struct{ ID string }
type LongDue struct{}

// TestTimeoutEngineRouting runs a dispatcher on a timeout.Router: a saga
// that asks for an engine (TimeoutEngine) gets it, the others follow the
// routes; ScheduledTimeouts lists both engines and CancelTimeouts reaches
// each; a router without the asked-for engine is refused up front.
func TestTimeoutEngineRouting(t *testing.T) {
	t.Parallel()
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	var fired atomic.Int64
	define := func(name string, opts ...saga.DefinitionOption) *saga.Definition[struct{ H saga.TimeoutHandle }] {
		d := saga.Define[struct{ H saga.TimeoutHandle }](name, opts...)
		saga.StartedBy(d, saga.By(func(m LongStart) string { return m.ID }),
			func(_ context.Context, c *saga.Context[struct{ H saga.TimeoutHandle }], _ LongStart) error {
				var err error
				c.Data.H, err = c.RequestTimeout(time.Hour, LongDue{})
				return err
			})
		saga.OnTimeout(d, func(context.Context, *saga.Context[struct{ H saga.TimeoutHandle }], LongDue) error {
			fired.Add(1)
			return nil
		})
		return d
	}
	pinned := define("pinned", saga.TimeoutEngine("vault"))
	plain := define("plain")
	router := &timeout.Router{
		Default: timeout.NewQueue(b),
		Routes:  []timeout.Route{{Beyond: 365 * 24 * time.Hour, Engine: "vault", Scheduler: timeout.NewQueue(b, timeout.WithEngineName("vault"))}},
	}
	if _, err := saga.NewDispatcher(b, memstore.New(), "routed", saga.WithSagas(pinned),
		saga.WithTimeouts(&timeout.Router{Default: timeout.NewQueue(b)})); !errors.Is(err, saga.ErrInvalidOption) {
		t.Fatalf("NewDispatcher with a router lacking the engine a saga asks for: %v, want ErrInvalidOption", err)
	}
	d, err := saga.NewDispatcher(b, memstore.New(), "routed", saga.WithSagas(pinned, plain), saga.WithTimeouts(router))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	for _, id := range []string{"a", "b"} {
		if _, err := d.Send(ctx, LongStart{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	run(t, d)
	engines := func() map[string]string {
		out := map[string]string{}
		for st, err := range d.ScheduledTimeouts(ctx, "") {
			if err != nil {
				t.Fatalf("ScheduledTimeouts: %v", err)
			}
			out[st.Saga+"/"+st.ID] = st.Ref.Engine()
			if st.Type != saga.MessageName[LongDue]() || st.At.IsZero() {
				t.Errorf("listed %+v", st)
			}
		}
		return out
	}
	testutil.Await(t, 10*time.Second, func() string {
		if got := engines(); len(got) != 4 || got["pinned/a"] != "vault" || got["plain/a"] != "queue" {
			return "timeouts by engine: " + fmtMap(got) + ", want pinned on vault, plain on queue"
		}
		return ""
	})
	res, err := d.CancelTimeouts(ctx, "pinned", "a")
	if err != nil || len(res.Cancelled) != 1 {
		t.Fatalf("CancelTimeouts(pinned/a) = %+v, %v", res, err)
	}
	all, err := d.CancelAllTimeouts(ctx, "plain")
	if err != nil || len(all) != 2 {
		t.Fatalf("CancelAllTimeouts(plain) = %+v, %v", all, err)
	}
	if got := engines(); len(got) != 1 || got["pinned/b"] != "vault" {
		t.Errorf("after cancels: %s, want only pinned/b on vault", fmtMap(got))
	}
	if n := fired.Load(); n != 0 {
		t.Errorf("%d timeouts fired an hour early", n)
	}
}

func fmtMap(m map[string]string) string {
	s := "{"
	for k, v := range m {
		s += " " + k + ":" + v
	}
	return s + " }"
}
