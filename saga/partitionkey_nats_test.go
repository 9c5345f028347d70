package saga_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

type (
	keyedStart struct{ ID string }
	idStart    struct{ ID string }
	keyedLater struct{}
	keyedOut   struct{ ID string }
)

// keyedSaga requests a timeout an hour away, and one more every second
// (recurring), and sends a message to out, all with the instance's key.
func keyedSaga[M any](name, out string, id func(M) string, opts ...saga.DefinitionOption) *saga.Definition[struct{}] {
	d := saga.Define[struct{}](name, opts...)
	saga.StartedBy(d, saga.By(id),
		func(ctx context.Context, c *saga.Context[struct{}], m M) error {
			if _, err := c.RequestTimeout(time.Hour, keyedLater{}); err != nil {
				return err
			}
			if _, err := c.RequestRecurringTimeout(time.Hour, keyedLater{}); err != nil {
				return err
			}
			return c.Send(out, keyedOut{ID: id(m)})
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[struct{}], _ keyedLater) error { return nil })
	return d
}

// An instance's timeouts and sends carry its key, on a real server: the
// key of the message that started it, or the one PartitionKeyBy gives,
// and land in the partition a plain message with that key lands in.
func TestInstanceKeyChoosesTimeoutPartition(t *testing.T) {
	t.Parallel()
	const parts = 8
	n, q := queueOnNewServer(t, transport.QueueConfig{Name: "keyed", Partitions: parts})
	out := n.openQueue(t, transport.QueueConfig{Name: "keyed-out", Partitions: parts})
	byStart := keyedSaga("keyed-start", "keyed-out", func(m keyedStart) string { return m.ID })
	byID := keyedSaga("keyed-id", "keyed-out", func(m idStart) string { return m.ID }, saga.PartitionKeyBy(func(id string) string { return "acct-" + id }))
	disp := n.dispatcher(t, nil, "keyed", saga.WithSagas(byStart, byID), saga.WithQueueConfig(transport.QueueConfig{Partitions: parts}))
	run(t, disp)

	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	want := map[string]string{} // instance ID → its key
	for _, id := range ids {
		want["start-"+id] = "tenant-" + id
		if _, err := disp.Send(ctxFor(t), keyedStart{ID: "start-" + id}, saga.WithPartitionKey("tenant-"+id)); err != nil {
			t.Fatal(err)
		}
		want["id-"+id] = "acct-id-" + id
		if _, err := disp.Send(ctxFor(t), idStart{ID: "id-" + id}); err != nil { // no key: PartitionKeyBy's
			t.Fatal(err)
		}
	}
	// Where a plain message with each key lands.
	probe := n.openQueue(t, transport.QueueConfig{Name: "keyed-probe", Partitions: parts})
	for _, key := range want {
		if _, err := probe.Send(ctxFor(t), &transport.Message{Body: []byte("probe"), PartitionKey: key}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Await(t, 10*time.Second, func() string {
		if n := len(peekAll(t, probe)); n < len(want) {
			return fmt.Sprintf("%d of %d probes in the queue", n, len(want))
		}
		return ""
	})
	partOf, seen := map[string]int{}, map[int]bool{}
	for _, m := range peekAll(t, probe) {
		partOf[m.PartitionKey] = transport.Partition(m.Seq)
		seen[transport.Partition(m.Seq)] = true
	}
	if len(seen) < 2 {
		t.Fatalf("the keys all land in partitions %v: choose keys that spread", seen)
	}

	// Two timeouts per instance wait, scheduled, and one message each
	// was sent to out.
	testutil.Await(t, 20*time.Second, func() string {
		waiting := 0
		for _, m := range peekAll(t, q) {
			if m.State == transport.Scheduled {
				waiting++
			}
		}
		if waiting < 2*len(want) || len(peekAll(t, out)) < len(want) {
			return fmt.Sprintf("%d timeouts scheduled and %d messages sent, want %d and %d", waiting, len(peekAll(t, out)), 2*len(want), len(want))
		}
		return ""
	})
	check := func(what string, m *transport.Message, id string) {
		key, ok := want[id]
		switch {
		case !ok:
			t.Errorf("%s for an unknown instance %q", what, id)
		case m.PartitionKey != key:
			t.Errorf("%s of instance %s: PartitionKey %q, want the instance's %q", what, id, m.PartitionKey, key)
		case transport.Partition(m.Seq) != partOf[key]:
			t.Errorf("%s of instance %s: in partition %d, want %d, where a message with key %q lands", what, id, transport.Partition(m.Seq), partOf[key], key)
		}
	}
	for _, m := range peekAll(t, q) {
		if m.State == transport.Scheduled {
			check("timeout", m, m.Properties["jetsaga-saga-id"])
		}
	}
	for _, m := range peekAll(t, out) {
		var body keyedOut
		if err := json.Unmarshal(m.Body, &body); err != nil {
			t.Fatal(err)
		}
		check("sent message", m, body.ID)
	}
	for id, key := range want {
		_, inst, ok := data[struct{}](t, disp, map[bool]string{true: "keyed-start", false: "keyed-id"}[id[:2] == "st"], id)
		if !ok || inst.PartitionKey != key {
			t.Errorf("instance %s: %+v, want its PartitionKey %q", id, inst, key)
		}
	}
}

// A key PartitionKeyBy gives that the transport would refuse fails the
// step that would start the instance, with a clear error, and starts
// nothing.
func TestHostilePartitionKeyBy(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"tenant\x00", "tenant.*.>\n", strings.Repeat("k", 10_000)} {
		b, err := transport.NewMemory()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() }) // after run's cleanup has stopped the dispatcher
		d := keyedSaga("keyed-hostile", "keyed-out", func(m keyedStart) string { return m.ID }, saga.PartitionKeyBy(func(string) string { return key }))
		res := make(chan saga.StepResult, 1)
		disp, err := saga.NewDispatcher(b, memstore.New(), "keyed-hostile", saga.WithSagas(d), saga.WithLogger(testutil.Logger()),
			saga.WithHooks(saga.Hooks{StepDone: func(_ context.Context, _ saga.StepInfo, r saga.StepResult) { res <- r }}))
		if err != nil {
			t.Fatal(err)
		}
		run(t, disp)
		if _, err := disp.Send(ctxFor(t), keyedStart{ID: "x"}); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-res:
			if r.Outcome != saga.DeadLettered || !errors.Is(r.Err, transport.ErrInvalidMessage) || !strings.Contains(r.Err.Error(), "partition key") {
				t.Errorf("key %.20q: step %s, %v; want dead-lettered with transport.ErrInvalidMessage about the partition key", key, r.Outcome, r.Err)
			}
		case <-ctxFor(t).Done():
			t.Fatalf("key %.20q: no step done", key)
		}
		if _, _, ok := data[struct{}](t, disp, "keyed-hostile", "x"); ok {
			t.Errorf("key %.20q: the instance was started", key)
		}
	}
}

type (
	sessionStart struct{ ID string }
	sessionOut   struct{ ID string }
)

// A step that gives a message a SessionID sends it in the session's
// partition, without the instance's key (which would differ from the
// session and be refused); a key it gives itself wins over the instance's.
func TestInstanceKeyYieldsToSession(t *testing.T) {
	t.Parallel()
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	out, err := b.OpenQueue(ctxFor(t), transport.QueueConfig{Name: "session-out", Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	d := saga.Define[struct{}]("keyed-session")
	saga.StartedBy(d, saga.By(func(m sessionStart) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[struct{}], m sessionStart) error {
			if err := c.Send("session-out", sessionOut(m), saga.WithSessionID("session-"+m.ID)); err != nil {
				return err
			}
			return c.Send("session-out", sessionOut(m), saga.WithPartitionKey("own-"+m.ID))
		})
	res := make(chan saga.StepResult, 1)
	disp, err := saga.NewDispatcher(b, memstore.New(), "keyed-session", saga.WithSagas(d), saga.WithLogger(testutil.Logger()),
		saga.WithHooks(saga.Hooks{StepDone: func(_ context.Context, _ saga.StepInfo, r saga.StepResult) { res <- r }}))
	if err != nil {
		t.Fatal(err)
	}
	run(t, disp)
	if _, err := disp.Send(ctxFor(t), sessionStart{ID: "x"}, saga.WithPartitionKey("tenant-x")); err != nil {
		t.Fatal(err)
	}
	if r := <-res; r.Outcome != saga.Handled {
		t.Fatalf("step %s: %v; want handled", r.Outcome, r.Err)
	}
	var got []string
	for _, m := range peekAll(t, out) {
		got = append(got, m.SessionID+"|"+m.PartitionKey)
	}
	slices.Sort(got)
	if want := []string{"session-x|", "|own-x"}; !slices.Equal(got, want) {
		t.Errorf("sent (session|key) %q, want %q", got, want)
	}
}
