package saga_test

// Stage resolve (resolve.go): which saga and instance a message goes to;
// instance IDs that are hostile to subjects, keys or encodings.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// R5: hostile instance IDs.

type HStart struct{ ID string }

// HRaw carries its ID as bytes, which JSON keeps even when they are not
// UTF-8 (a string field would be repaired on decoding).
type HRaw struct{ ID []byte }

type HDue struct{}

type hostileData struct {
	Count, Fired int
	Seen         string
}

func hostileSaga() *saga.Definition[hostileData] {
	d := saga.Define[hostileData]("hostile")
	saga.StartedBy(d, saga.By(func(m HStart) string { return m.ID }),
		func(_ context.Context, c *saga.Context[hostileData], _ HStart) error {
			c.Data.Count++
			c.Data.Seen = c.ID()
			if c.IsNew() {
				_, err := c.RequestTimeout(300*time.Millisecond, HDue{})
				return err
			}
			return nil
		})
	saga.StartedBy(d, saga.By(func(m HRaw) string { return string(m.ID) }),
		func(_ context.Context, c *saga.Context[hostileData], _ HRaw) error {
			c.Data.Count++
			return nil
		})
	saga.OnTimeout(d, func(_ context.Context, c *saga.Context[hostileData], _ HDue) error {
		c.Data.Fired++
		return nil
	})
	return d
}

func TestHostileIDs(t *testing.T) {
	t.Parallel()
	qcfg := transport.QueueConfig{Name: "hostile", LockDuration: 2 * time.Second}
	n, q := queueOnNewServer(t, qcfg)
	d := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(hostileSaga()), saga.WithQueueConfig(qcfg), saga.WithRetry(fastRetry))
	ctx := t.Context()

	good := []string{
		"a.b", "a.*", "a.>", "*", ">", "a b c", " ", "ünï.cødé 日本語 🙂",
		strings.Repeat(".*> ", 125),   // 500 bytes of subject syntax
		strings.Repeat("é", 250),      // 500 bytes, 250 runes
		strings.Repeat("y", 512),      // the limit
		"$KV.jetsaga_sagas.>",         // the store's own subject space
		"JETSAGA.Q.hostile.0.m",       // the queue's own subject
		`{"json":true}`, `a/b\c`, "=", // no padding confusion in keys
	}
	want := map[string]int{}
	for _, id := range good {
		want[id]++
		if _, err := d.Send(ctx, HStart{ID: id}); err != nil {
			t.Fatalf("send %.40q: %v", id, err)
		}
	}
	want["a.*"]++ // a second message for a.* must not reach a.b
	if _, err := d.Send(ctx, HStart{ID: "a.*"}); err != nil {
		t.Fatal(err)
	}

	bad := []struct {
		name string
		msg  any
	}{
		{"over 512 bytes", HStart{ID: strings.Repeat("z", 513)}},
		{"invalid UTF-8", HRaw{ID: []byte{'b', 'a', 'd', 0xff, 0xfe}}},
		{"empty", HStart{ID: ""}},
	}
	for i, b := range bad {
		if _, err := d.Send(ctx, b.msg, saga.WithMessageID(fmt.Sprintf("bad-%d", i))); err != nil {
			t.Fatalf("send %s: %v", b.name, err)
		}
	}
	run(t, d)

	testutil.Await(t, 20*time.Second, func() string {
		for _, id := range good {
			h, _, ok := data[hostileData](t, d, "hostile", id)
			if !ok || h.Count != want[id] || h.Fired != 1 {
				return fmt.Sprintf("instance %.40q: %+v (found %t), want count %d and its timeout handled", id, h, ok, want[id])
			}
		}
		if got := len(peekAll(t, q.DeadLetterQueue())); got < len(bad) {
			return fmt.Sprintf("%d of %d bad IDs dead-lettered", got, len(bad))
		}
		return queueEmpty(t, q)
	})
	for _, id := range good {
		h, inst, _ := data[hostileData](t, d, "hostile", id)
		if h.Count != want[id] || h.Fired != 1 || h.Seen != id || inst.ID != id {
			t.Errorf("instance %.40q: %+v (ID %.40q), want count %d, one timeout, its own ID", id, h, inst.ID, want[id])
		}
	}
	dl := map[string]*transport.Message{}
	for _, m := range peekAll(t, q.DeadLetterQueue()) {
		dl[originalID(m)] = m
	}
	if len(dl) != len(bad) {
		t.Errorf("dead-lettered %v, want the %d bad IDs only", keys(dl), len(bad))
	}
	for i, b := range bad {
		m := dl[fmt.Sprintf("bad-%d", i)]
		switch {
		case m == nil:
			t.Errorf("%s: not dead-lettered", b.name)
		case b.name == "empty":
			// An empty ID is refused by the Finder wrapper as a plain
			// (retried) error, unlike the other bad IDs; see the report.
			t.Logf("%s: dead-lettered with reason %q: %s", b.name, m.DeadLetterReason, m.DeadLetterDescription)
		case m.DeadLetterReason != saga.ReasonPermanent:
			t.Errorf("%s: reason %q (%s), want %q", b.name, m.DeadLetterReason, m.DeadLetterDescription, saga.ReasonPermanent)
		}
	}
	for _, id := range []string{strings.Repeat("z", 513), "bad\xff\xfe"} {
		if _, _, ok := data[hostileData](t, d, "hostile", id); ok {
			t.Errorf("instance %.40q stored, want nothing for a refused ID", id)
		}
	}
}
