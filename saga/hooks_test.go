package saga_test

// Hooks: what StepStarted, StepDone and Outgoing see of a step.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

type HookStart struct{ ID string }
type HookNext struct{ ID string }
type HookDue struct{}

type traceKey struct{}

// TestHooksCarryContext checks what tracing hooks build on: Outgoing adds
// properties from the step's context (the one StepStarted returned) to
// every message a handler asks for — sends and timeouts — and the step
// that receives them sees them in StepInfo.Properties; a timeout's step
// knows its due time.
func TestHooksCarryContext(t *testing.T) {
	t.Parallel()
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	var due time.Time
	def := saga.Define[struct{}]("hooked")
	saga.StartedBy(def, saga.By(func(m HookStart) string { return m.ID }),
		func(_ context.Context, c *saga.Context[struct{}], m HookStart) error {
			due = c.Now().Add(300 * time.Millisecond)
			if _, err := c.RequestTimeoutAt(due, HookDue{}); err != nil {
				return err
			}
			return c.Send("hooks", HookNext(m))
		})
	saga.Handles(def, saga.By(func(m HookNext) string { return m.ID }),
		func(context.Context, *saga.Context[struct{}], HookNext) error { return nil })
	saga.OnTimeout(def, func(context.Context, *saga.Context[struct{}], HookDue) error { return nil })

	var mu sync.Mutex
	seen := map[string]saga.StepInfo{}
	hooks := saga.Hooks{
		StepStarted: func(ctx context.Context, info saga.StepInfo) context.Context {
			return context.WithValue(ctx, traceKey{}, "from-"+info.MessageType)
		},
		StepDone: func(_ context.Context, info saga.StepInfo, _ saga.StepResult) {
			mu.Lock()
			seen[info.MessageType] = info
			mu.Unlock()
		},
		Outgoing: func(ctx context.Context, props map[string]string) {
			props["trace"], _ = ctx.Value(traceKey{}).(string)
		},
	}
	d, err := saga.NewDispatcher(b, memstore.New(), "hooks", saga.WithSagas(def), saga.WithHooks(hooks))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Send(ctxFor(t), HookStart{ID: "h1"}); err != nil {
		t.Fatal(err)
	}
	run(t, d)
	start, next, tmo := saga.MessageName[HookStart](), saga.MessageName[HookNext](), saga.MessageName[HookDue]()
	testutil.Await(t, 10*time.Second, func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) < 3 {
			return "steps seen: " + keysOf(seen)
		}
		return ""
	})
	mu.Lock()
	defer mu.Unlock()
	for _, typ := range []string{next, tmo} {
		if got := seen[typ].Properties["trace"]; got != "from-"+start {
			t.Errorf("%s arrived with trace property %q, want %q", typ, got, "from-"+start)
		}
	}
	if got := seen[tmo].TimeoutDue; !got.Equal(due) {
		t.Errorf("timeout step: TimeoutDue %v, want %v", got, due)
	}
	if seen[next].MessageID == "" {
		t.Errorf("step of a message a saga sent: MessageID empty, want the one the saga gave it")
	}
	if !seen[next].TimeoutDue.IsZero() || seen[next].EnqueuedAt.IsZero() {
		t.Errorf("plain message step: TimeoutDue %v (want zero), EnqueuedAt %v (want set)", seen[next].TimeoutDue, seen[next].EnqueuedAt)
	}
}

func keysOf(m map[string]saga.StepInfo) string {
	s := ""
	for k := range m {
		s += k + " "
	}
	return s
}

// What hooks see.

type SeeStart struct{ ID string }

type SeeDue struct{}

func TestStepStartedKnowsSagaAndID(t *testing.T) {
	t.Parallel()
	qcfg := transport.QueueConfig{Name: "see", LockDuration: 2 * time.Second}
	n, q := queueOnNewServer(t, qcfg)
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
