package sagatest_test

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/sagatest"
	"github.com/jetsaga/jetsaga/transport"
)

// A dunning saga in two versions. Version 1 (as released) keeps a count
// of reminders and waits for a timeout named "dunning.Remind" and a
// message "dunning.Paid". Version 2 renames the count, keeps the amount,
// gives the timeout payload a new shape under a new name and renames
// the payment message: its records, timeouts and messages pending from
// version 1 must still load, fire and be handled. The golden files in
// testdata/dunning-v1 were recorded from version 1 with -update.

var update = flag.Bool("update", false, "record the golden files of testdata/dunning-v1 from version 1")

type (
	dunningIssued struct {
		Invoice string
		Amount  int
	}
	dunningV1 struct {
		Invoice string
		Count   int
	}
	remindV1 struct{}
	paidV1   struct{ Invoice string }

	dunningV2 struct {
		Invoice   string
		Amount    int
		Reminders int // Count, renamed
	}
	remindV2 struct{ Nth int }
	paidV2   struct{ Invoice string }

	reminderSent struct {
		Invoice string
		Nth     int
	}
)

func (dunningIssued) MessageName() string { return "dunning.Issued" }
func (remindV1) MessageName() string      { return "dunning.Remind" }
func (paidV1) MessageName() string        { return "dunning.Paid" }
func (remindV2) MessageName() string      { return "dunning.Remind.v2" }
func (paidV2) MessageName() string        { return "dunning.InvoicePaid" }
func (reminderSent) MessageName() string  { return "dunning.ReminderSent" }

// remindV2 replaced remindV1, whose timeouts carried no count: the first
// one pending after the deploy is at least the second reminder.
func (remindV2) MessageAliases() []saga.Alias {
	return []saga.Alias{{Name: "dunning.Remind", Upcast: saga.Upcast(func(remindV1) (remindV2, error) { return remindV2{Nth: 2}, nil })}}
}

// paidV2 is paidV1 renamed: same shape.
func (paidV2) MessageAliases() []saga.Alias { return []saga.Alias{{Name: "dunning.Paid"}} }

func dunningV1Saga() *saga.Definition[dunningV1] {
	s := saga.Define[dunningV1]("dunning")
	saga.StartedBy(s, saga.By(func(m dunningIssued) string { return m.Invoice }),
		func(_ context.Context, c *saga.Context[dunningV1], m dunningIssued) error {
			c.Data.Invoice = m.Invoice
			_, err := c.RequestTimeout(14*day, remindV1{})
			return err
		})
	saga.OnTimeout(s, func(_ context.Context, c *saga.Context[dunningV1], _ remindV1) error {
		c.Data.Count++
		if err := c.Send("mail", reminderSent{Invoice: c.Data.Invoice, Nth: c.Data.Count}); err != nil {
			return err
		}
		_, err := c.RequestTimeout(7*day, remindV1{})
		return err
	})
	saga.Handles(s, saga.By(func(m paidV1) string { return m.Invoice }),
		func(_ context.Context, c *saga.Context[dunningV1], _ paidV1) error {
			c.MarkComplete()
			return nil
		})
	return s
}

func dunningV2Saga() *saga.Definition[dunningV2] {
	s := saga.Define[dunningV2]("dunning", saga.DataVersion(2,
		saga.Upcast(func(old dunningV1) (dunningV2, error) {
			return dunningV2{Invoice: old.Invoice, Reminders: old.Count, Amount: -1}, nil // amount unknown
		})))
	saga.StartedBy(s, saga.By(func(m dunningIssued) string { return m.Invoice }),
		func(_ context.Context, c *saga.Context[dunningV2], m dunningIssued) error {
			c.Data.Invoice, c.Data.Amount = m.Invoice, m.Amount
			_, err := c.RequestTimeout(14*day, remindV2{Nth: 1})
			return err
		})
	saga.OnTimeout(s, func(_ context.Context, c *saga.Context[dunningV2], r remindV2) error {
		c.Data.Reminders++
		if r.Nth != c.Data.Reminders {
			return saga.Permanent(errReminderCount{got: r.Nth, want: c.Data.Reminders})
		}
		if err := c.Send("mail", reminderSent{Invoice: c.Data.Invoice, Nth: r.Nth}); err != nil {
			return err
		}
		_, err := c.RequestTimeout(7*day, remindV2{Nth: r.Nth + 1})
		return err
	})
	saga.Handles(s, saga.By(func(m paidV2) string { return m.Invoice }),
		func(_ context.Context, c *saga.Context[dunningV2], _ paidV2) error {
			c.MarkComplete()
			return nil
		})
	return s
}

type errReminderCount struct{ got, want int }

func (e errReminderCount) Error() string { return "reminder count mismatch" }

// golden is what version 1 left behind for invoice inv-1, 14 days after
// it was issued: its record, the message of its pending timeout, and a
// payment sent but not yet handled.
type golden struct {
	At      time.Time          // the virtual time it was recorded at
	Record  json.RawMessage    // the instance's stored record
	Timeout *transport.Message // its pending timeout, as scheduled
	Paid    *transport.Message // a payment, as sent
}

const goldenFile = "testdata/dunning-v1/inv-1.json"

// recordGolden records the golden file from version 1 (go test -run
// Dunning -update).
func recordGolden(t *testing.T) {
	v1 := dunningV1Saga()
	sagatest.Run(t, []saga.Saga{v1}, func(t *testing.T, env *sagatest.Env) {
		env.Send(dunningIssued{Invoice: "inv-1", Amount: 100})
		env.Advance(14 * day) // the first reminder: Count 1, the next one due at +21d
		var g golden
		g.At = env.Now()
		g.Record = env.StoredRecord(v1, "inv-1")
		q, err := env.Broker().Queue(t.Context(), sagatest.Queue)
		if err != nil {
			t.Fatal(err)
		}
		for m, err := range q.Browse(t.Context(), 0) {
			if err != nil {
				t.Fatal(err)
			}
			if m.State == transport.Scheduled && m.Properties[saga.TypeProperty] == "dunning.Remind" {
				g.Timeout = m
			}
		}
		body, _ := json.Marshal(paidV1{Invoice: "inv-1"})
		g.Paid = &transport.Message{MessageID: "pay-1", Body: body, ContentType: "application/json",
			Properties: map[string]string{saga.TypeProperty: "dunning.Paid"}}
		if g.Timeout == nil {
			t.Fatalf("no pending timeout\n%s", env.Journal())
		}
		b, err := json.MarshalIndent(g, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(goldenFile), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(goldenFile, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	})
}

func readGolden(t *testing.T) golden {
	t.Helper()
	if *update {
		recordGolden(t)
	}
	b, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// TestDunningV1LoadsUnderV2: version 1's record is upcast, its pending
// timeout fires under its old name and old shape, and its payment is
// handled under the old name, by version 2.
func TestDunningV1LoadsUnderV2(t *testing.T) {
	g := readGolden(t)
	v2 := dunningV2Saga()
	sagatest.Run(t, []saga.Saga{v2}, func(t *testing.T, env *sagatest.Env) {
		env.Restore(v2, "inv-1", g.Record)
		sagatest.AssertState(t, env, v2, "inv-1", dunningV2{Invoice: "inv-1", Reminders: 1, Amount: -1})
		if inst, err := env.Dispatcher().Instance(t.Context(), "dunning", "inv-1"); err != nil || inst.DataVersion != 1 {
			t.Fatalf("restored instance: %+v, %v; want data version 1", inst, err)
		}

		env.Deliver(g.Timeout) // scheduled for +21d
		env.AdvanceTo(g.Timeout.ScheduledAt)
		env.AssertSent(t, "mail", reminderSent{Invoice: "inv-1", Nth: 2})
		sagatest.AssertState(t, env, v2, "inv-1", dunningV2{Invoice: "inv-1", Reminders: 2, Amount: -1})
		if inst, err := env.Dispatcher().Instance(t.Context(), "dunning", "inv-1"); err != nil || inst.DataVersion != 2 {
			t.Fatalf("instance after a version-2 step: %+v, %v; want data version 2", inst, err)
		}
		if ts := env.Timeouts(v2, "inv-1"); len(ts) != 1 || ts[0].Type != "dunning.Remind.v2" {
			t.Errorf("pending timeouts %+v, want one dunning.Remind.v2", ts)
		}

		env.Deliver(g.Paid)
		env.AssertCompleted(t, v2, "inv-1")
	}, sagatest.WithStart(g.At))
}

// TestDunningV1PayloadsDecode: the payloads version 1 recorded decode as
// version 2's types.
func TestDunningV1PayloadsDecode(t *testing.T) {
	g := readGolden(t)
	if got := sagatest.AssertDecodes[remindV2](t, g.Timeout.Properties[saga.TypeProperty], g.Timeout.Body); got != (remindV2{Nth: 2}) {
		t.Errorf("timeout payload: got %+v, want %+v", got, remindV2{Nth: 2})
	}
	if got := sagatest.AssertDecodes[paidV2](t, g.Paid.Properties[saga.TypeProperty], g.Paid.Body); got != (paidV2{Invoice: "inv-1"}) {
		t.Errorf("payment: got %+v, want %+v", got, paidV2{Invoice: "inv-1"})
	}
}

// TestAssertDecodesFails: a name that is neither the type's nor an alias
// fails the test.
func TestAssertDecodesFails(t *testing.T) {
	ft := &fakeT{TB: t}
	sagatest.AssertDecodes[paidV2](ft, "dunning.Refund", []byte(`{}`))
	if !ft.fatal || !strings.Contains(ft.text(), "dunning.Refund") {
		t.Errorf("AssertDecodes of an unknown name: fatal %v, %q; want a fatal failure naming it", ft.fatal, ft.text())
	}
	ft = &fakeT{TB: t}
	sagatest.AssertDecodes[remindV2](ft, "dunning.Remind", []byte(`[1]`))
	if !ft.fatal {
		t.Error("AssertDecodes of a body that does not upcast did not fail the test")
	}
}

// TestTimeoutOfNamesATimeoutByType: of three pending timeouts, the input
// delivers the one of the type it names, not the earliest.
func TestTimeoutOfNamesATimeoutByType(t *testing.T) {
	inv := invoiceSaga()
	var at []time.Duration
	sagatest.Explore(t, []saga.Saga{inv},
		func(t *testing.T, env *sagatest.Env) {
			env.Send(InvoiceIssued{Invoice: "inv-9", Customer: "eve", Amount: 10})
		},
		[]sagatest.Input{sagatest.TimeoutOf[secondReminder](inv, "inv-9")},
		func(t *testing.T, env *sagatest.Env) {
			at = append(at, env.Now().Sub(env.Start()))
		})
	if len(at) != 1 || at[0] != 21*day {
		t.Errorf("the input was delivered at %v, want once, at +21d (the second reminder's due time)", at)
	}
}

// TestJournalLimit: a state longer than the limit (here over 200
// bytes) shows as its size; the option changes the limit, and 0 lifts it.
func TestJournalLimit(t *testing.T) {
	inv := invoiceSaga()
	for _, c := range []struct {
		name string
		opts []sagatest.Option
		full bool // the state shows in full
	}{
		{"default", nil, false},
		{"limit 1000", []sagatest.Option{sagatest.WithJournalLimit(1000)}, true},
		{"limit 100", []sagatest.Option{sagatest.WithJournalLimit(100)}, false},
		{"no limit", []sagatest.Option{sagatest.WithJournalLimit(0)}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			sagatest.Run(t, []saga.Saga{inv}, func(t *testing.T, env *sagatest.Env) {
				env.Send(InvoiceIssued{Invoice: "inv-10", Customer: "long-" + strings.Repeat("x", 150), Amount: 10})
				j := env.Journal()
				full := strings.Contains(j, `  state {"Customer":"long-xxx`)
				sized := strings.Contains(j, "  state (")
				if full != c.full || sized == c.full {
					t.Errorf("state in full %v, as its size %v; want in full %v:\n%s", full, sized, c.full, j)
				}
			}, c.opts...)
		})
	}
}

// TestSendAfterRestoreIsNotADuplicate: the golden record's inbox holds
// the MessageIDs of the Env that recorded it; a message sent with
// Env.Send in another Env is handled, not dropped as a duplicate of one of
// them.
func TestSendAfterRestoreIsNotADuplicate(t *testing.T) {
	g := readGolden(t)
	v2 := dunningV2Saga()
	sagatest.Run(t, []saga.Saga{v2}, func(t *testing.T, env *sagatest.Env) {
		env.Restore(v2, "inv-1", g.Record)
		env.Send(paidV2{Invoice: "inv-1"}) // the Env's first send, as the recorded Issued was
		env.AssertCompleted(t, v2, "inv-1")
	}, sagatest.WithStart(g.At))
}
