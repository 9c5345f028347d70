package sagatest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/sagatest"
)

const day = 24 * time.Hour

// The invoice saga: issued → a reminder after 14 days, a second one after
// 21, written off after 30 (and completed); paid in full → the pending
// timeouts are cancelled and the saga completes.

type (
	InvoiceIssued struct {
		Invoice, Customer string
		Amount            int
	}
	PaymentReceived struct {
		Invoice string
		Amount  int
	}
)

// Timeout payloads.
type (
	firstReminder  struct{}
	secondReminder struct{}
	writeOff       struct{}
)

// Messages the saga sends to the "billing" queue.
type (
	ReminderSent struct {
		Invoice, Customer string
		N, Due            int
	}
	InvoicePaid       struct{ Invoice string }
	InvoiceWrittenOff struct {
		Invoice string
		Due     int
	}
)

type invoice struct {
	Customer  string
	Due       int
	Reminders int
	First     saga.TimeoutHandle
	Second    saga.TimeoutHandle
	WriteOff  saga.TimeoutHandle
}

func invoiceSaga() *saga.Definition[invoice] {
	d := saga.Define[invoice]("invoice")
	saga.StartedBy(d, saga.By(func(m InvoiceIssued) string { return m.Invoice }),
		func(ctx context.Context, c *saga.Context[invoice], m InvoiceIssued) error {
			c.Data = invoice{Customer: m.Customer, Due: m.Amount}
			var err error
			if c.Data.First, err = c.RequestTimeout(14*day, firstReminder{}); err != nil {
				return err
			}
			if c.Data.Second, err = c.RequestTimeout(21*day, secondReminder{}); err != nil {
				return err
			}
			c.Data.WriteOff, err = c.RequestTimeout(30*day, writeOff{})
			return err
		})
	saga.Handles(d, saga.By(func(m PaymentReceived) string { return m.Invoice }),
		func(ctx context.Context, c *saga.Context[invoice], m PaymentReceived) error {
			c.Data.Due -= m.Amount
			if c.Data.Due > 0 {
				return nil
			}
			// Cancelled explicitly (MarkComplete would too), to exercise
			// CancelTimeout.
			c.CancelTimeout(c.Data.First)
			c.CancelTimeout(c.Data.Second)
			c.CancelTimeout(c.Data.WriteOff)
			c.MarkComplete()
			return c.Send("billing", InvoicePaid{Invoice: c.ID()})
		})
	remind := func(c *saga.Context[invoice]) error {
		c.Data.Reminders++
		return c.Send("billing", ReminderSent{Invoice: c.ID(), Customer: c.Data.Customer, N: c.Data.Reminders, Due: c.Data.Due})
	}
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[invoice], _ firstReminder) error { return remind(c) })
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[invoice], _ secondReminder) error { return remind(c) })
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[invoice], _ writeOff) error {
		c.MarkComplete()
		return c.Send("billing", InvoiceWrittenOff{Invoice: c.ID(), Due: c.Data.Due})
	})
	return d
}

// thirtyDays runs the full unpaid-invoice scenario and checks it at every
// step.
func thirtyDays(t *testing.T, env *sagatest.Env, inv *saga.Definition[invoice]) {
	t.Helper()
	start := env.Now()
	env.Send(InvoiceIssued{Invoice: "inv-1", Customer: "ann", Amount: 100})

	sagatest.AssertState(t, env, inv, "inv-1", invoice{
		Customer: "ann", Due: 100,
		First:  env.Timeouts(inv, "inv-1")[0].Handle,
		Second: env.Timeouts(inv, "inv-1")[1].Handle, WriteOff: env.Timeouts(inv, "inv-1")[2].Handle,
	})
	wantTimeouts(t, env.Timeouts(inv, "inv-1"), start,
		"sagatest_test.firstReminder", 14*day,
		"sagatest_test.secondReminder", 21*day,
		"sagatest_test.writeOff", 30*day)
	env.AssertSent(t, "billing")

	env.Advance(14*day - time.Nanosecond)
	env.AssertSent(t, "billing") // not a nanosecond early
	env.Advance(time.Nanosecond)
	env.AssertSent(t, "billing", ReminderSent{Invoice: "inv-1", Customer: "ann", N: 1, Due: 100})
	if got := sagatest.State(t, env, inv, "inv-1").Reminders; got != 1 {
		t.Errorf("after 14 days: got %d reminders in state, want 1", got)
	}
	wantTimeouts(t, env.Timeouts(inv, "inv-1"), start,
		"sagatest_test.secondReminder", 21*day,
		"sagatest_test.writeOff", 30*day)

	env.AdvanceTo(start.Add(21 * day))
	env.AssertSent(t, "billing",
		ReminderSent{Invoice: "inv-1", Customer: "ann", N: 1, Due: 100},
		ReminderSent{Invoice: "inv-1", Customer: "ann", N: 2, Due: 100})

	env.Advance(9 * day)
	env.AssertCompleted(t, inv, "inv-1")
	env.AssertSent(t, "billing",
		ReminderSent{Invoice: "inv-1", Customer: "ann", N: 1, Due: 100},
		ReminderSent{Invoice: "inv-1", Customer: "ann", N: 2, Due: 100},
		InvoiceWrittenOff{Invoice: "inv-1", Due: 100})
	if ts := env.Timeouts(inv, "inv-1"); len(ts) != 0 {
		t.Errorf("after write-off: got pending timeouts %v, want none", ts)
	}
	for i, m := range env.Messages("billing") {
		want := start.Add([]time.Duration{14 * day, 21 * day, 30 * day}[i])
		if !m.EnqueuedAt.Equal(want) {
			t.Errorf("message %d enqueued at %v, want %v", i+1, m.EnqueuedAt, want)
		}
	}
}

// wantTimeouts checks pending timeouts against (type, offset) pairs.
func wantTimeouts(t *testing.T, got []saga.PendingTimeout, start time.Time, want ...any) {
	t.Helper()
	var g, w []string
	for _, p := range got {
		g = append(g, fmt.Sprintf("%s at +%v", p.Type, p.At.Sub(start)))
	}
	for i := 0; i < len(want); i += 2 {
		w = append(w, fmt.Sprintf("%s at +%v", want[i], want[i+1]))
	}
	if strings.Join(g, ", ") != strings.Join(w, ", ") {
		t.Errorf("pending timeouts:\n got  %v\n want %v", g, w)
	}
}

func TestInvoiceWrittenOffAfterThirtyDays(t *testing.T) {
	inv := invoiceSaga()
	sagatest.Run(t, []saga.Saga{inv}, func(t *testing.T, env *sagatest.Env) {
		thirtyDays(t, env, inv)
		if got := env.Now().Sub(env.Start()); got != 30*day {
			t.Errorf("virtual time passed: got %v, want %v", got, 30*day)
		}
	})
}

func TestPaymentOnDayTwentyCancelsRemainingTimeouts(t *testing.T) {
	inv := invoiceSaga()
	sagatest.Run(t, []saga.Saga{inv}, func(t *testing.T, env *sagatest.Env) {
		env.Send(InvoiceIssued{Invoice: "inv-2", Customer: "bob", Amount: 100})
		env.Advance(10 * day)
		env.Send(PaymentReceived{Invoice: "inv-2", Amount: 40}) // partial: nothing cancelled
		if got := len(env.Timeouts(inv, "inv-2")); got != 3 {
			t.Errorf("after a partial payment: got %d pending timeouts, want 3", got)
		}
		env.Advance(10 * day)
		env.Send(PaymentReceived{Invoice: "inv-2", Amount: 60})

		env.AssertCompleted(t, inv, "inv-2")
		if ts := env.Timeouts(inv, "inv-2"); len(ts) != 0 {
			t.Errorf("after payment: got pending timeouts %v, want none", ts)
		}
		env.Advance(60 * day)
		env.AssertSent(t, "billing",
			ReminderSent{Invoice: "inv-2", Customer: "bob", N: 1, Due: 60},
			InvoicePaid{Invoice: "inv-2"})
		if sent := sagatest.Sent[ReminderSent](env, "billing"); len(sent) != 1 {
			t.Errorf("after 80 days: got %d reminders, want 1", len(sent))
		}
		if env.Exists(inv, "inv-2") {
			t.Error("Exists after completion: got true, want false")
		}
		// Run checks on return that no timeout is left in the queue.
	})
}

func TestJournal(t *testing.T) {
	inv := invoiceSaga()
	sagatest.Run(t, []saga.Saga{inv}, func(t *testing.T, env *sagatest.Env) {
		env.Send(InvoiceIssued{Invoice: "inv-3", Customer: "cy", Amount: 50})
		env.Advance(14*day + 5*time.Minute)
		env.Send(PaymentReceived{Invoice: "inv-3", Amount: 50})
		env.Send(PaymentReceived{Invoice: "inv-3", Amount: 50}) // the instance is gone

		want := `+0s        test sent sagatest_test.InvoiceIssued {"Invoice":"inv-3","Customer":"cy","Amount":50}
+0s        invoice/inv-3: sagatest_test.InvoiceIssued handled, started
+0s          state {"Customer":"cy","Due":50,"Reminders":0,"First":"H1","Second":"H2","WriteOff":"H3"}
+0s          timeout sagatest_test.firstReminder requested, due +14d
+0s          timeout sagatest_test.secondReminder requested, due +21d
+0s          timeout sagatest_test.writeOff requested, due +30d
+14d       invoice/inv-3: timeout sagatest_test.firstReminder handled
+14d         state {"Customer":"cy","Due":50,"Reminders":1,"First":"H1","Second":"H2","WriteOff":"H3"}
+14d         sent sagatest_test.ReminderSent to billing {"Invoice":"inv-3","Customer":"cy","N":1,"Due":50}
+14d5m0s   test sent sagatest_test.PaymentReceived {"Invoice":"inv-3","Amount":50}
+14d5m0s   invoice/inv-3: sagatest_test.PaymentReceived handled, completed
+14d5m0s     timeout sagatest_test.secondReminder cancelled, was due +21d
+14d5m0s     timeout sagatest_test.writeOff cancelled, was due +30d
+14d5m0s     sent sagatest_test.InvoicePaid to billing {"Invoice":"inv-3"}
+14d5m0s   test sent sagatest_test.PaymentReceived {"Invoice":"inv-3","Amount":50}
+14d5m0s   invoice/inv-3: sagatest_test.PaymentReceived dropped
`
		got := env.Journal()
		// Timeout handles are random-looking hashes: name them H1, H2, H3.
		st := handles(t, got)
		for i, h := range st {
			got = strings.ReplaceAll(got, h, fmt.Sprintf("H%d", i+1))
		}
		if got != want {
			t.Errorf("journal:\n%s\nwant:\n%s", got, want)
		}
	}, sagatest.WithQueues("billing"))
}

// handles returns the timeout handles in the journal's first state line.
func handles(t *testing.T, journal string) []string {
	t.Helper()
	for line := range strings.Lines(journal) {
		if _, st, ok := strings.Cut(line, "state "); ok {
			var out []string
			for _, f := range []string{`"First":"`, `"Second":"`, `"WriteOff":"`} {
				_, rest, _ := strings.Cut(st, f)
				h, _, _ := strings.Cut(rest, `"`)
				out = append(out, h)
			}
			return out
		}
	}
	t.Fatalf("no state line in journal:\n%s", journal)
	return nil
}

// fakeT records what an assertion reports instead of failing the test.
type fakeT struct {
	testing.TB
	mu     sync.Mutex
	errors []string
	fatal  bool
}

func (f *fakeT) Helper() {}

func (f *fakeT) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	f.fatal = true
}

func (f *fakeT) text() string { return strings.Join(f.errors, "\n") }

func TestAssertionFailuresReadWell(t *testing.T) {
	inv := invoiceSaga()
	sagatest.Run(t, []saga.Saga{inv}, func(t *testing.T, env *sagatest.Env) {
		env.Send(InvoiceIssued{Invoice: "inv-4", Customer: "dee", Amount: 70})
		env.Advance(21 * day)

		ft := &fakeT{TB: t}
		env.AssertSent(ft, "billing",
			ReminderSent{Invoice: "inv-4", Customer: "dee", N: 1, Due: 70},
			ReminderSent{Invoice: "inv-4", Customer: "dee", N: 2, Due: 7},
			InvoiceWrittenOff{Invoice: "inv-4", Due: 70})
		msg := ft.text()
		for _, want := range []string{
			"sagatest: messages of type sagatest_test.ReminderSent, sagatest_test.InvoiceWrittenOff sent to billing by +21d: got 2, want 3",
			`#1 ok   sagatest_test.ReminderSent{Invoice:"inv-4", Customer:"dee", N:1, Due:70}`,
			`#2 got  sagatest_test.ReminderSent{Invoice:"inv-4", Customer:"dee", N:2, Due:70}`,
			`     want sagatest_test.ReminderSent{Invoice:"inv-4", Customer:"dee", N:2, Due:7}`,
			"#3 got  (nothing)\n     want sagatest_test.InvoiceWrittenOff{Invoice:\"inv-4\", Due:70}",
			"journal (now +21d):",
			"  +21d       invoice/inv-4: timeout sagatest_test.secondReminder handled",
			`  +21d         sent sagatest_test.ReminderSent to billing {"Invoice":"inv-4","Customer":"dee","N":2,"Due":70}`,
		} {
			if !strings.Contains(msg, want) {
				t.Errorf("AssertSent failure lacks %q; it reads:\n%s", want, msg)
			}
		}

		ft = &fakeT{TB: t}
		env.AssertSent(ft, "billing",
			ReminderSent{Invoice: "inv-4", Customer: "dee", N: 1, Due: 70},
			ReminderSent{Invoice: "inv-4", Customer: "dee", N: 3, Due: 70})
		if msg := ft.text(); !strings.HasPrefix(msg, "sagatest: messages of type sagatest_test.ReminderSent sent to billing by +21d: got 2 that differ from those wanted\n"+
			"  #1 ok   sagatest_test.ReminderSent{Invoice:\"inv-4\", Customer:\"dee\", N:1, Due:70}\n"+
			"  #2 got  sagatest_test.ReminderSent{Invoice:\"inv-4\", Customer:\"dee\", N:2, Due:70}\n"+
			"     want sagatest_test.ReminderSent{Invoice:\"inv-4\", Customer:\"dee\", N:3, Due:70}\n"+
			"journal (now +21d):\n") {
			t.Errorf("AssertSent failure with the right count reads:\n%s", msg)
		}

		ft = &fakeT{TB: t}
		env.AssertSent(ft, "other")
		env.AssertSent(ft, "billing")
		if msg := ft.text(); !strings.Contains(msg, "sagatest: messages sent to billing by +21d: got 2, want 0\n  #1 got  sagatest_test.ReminderSent {") {
			t.Errorf("AssertSent with nothing wanted reads:\n%s", msg)
		}

		ft = &fakeT{TB: t}
		want := sagatest.State(t, env, inv, "inv-4")
		want.Reminders = 3
		sagatest.AssertState(ft, env, inv, "inv-4", want)
		if msg := ft.text(); !strings.Contains(msg, "sagatest: state of invoice/inv-4 at +21d:\n  got  sagatest_test.invoice{Customer:\"dee\", Due:70, Reminders:2,") ||
			!strings.Contains(msg, "\n  want sagatest_test.invoice{Customer:\"dee\", Due:70, Reminders:3,") {
			t.Errorf("AssertState failure reads:\n%s", msg)
		}

		ft = &fakeT{TB: t}
		env.AssertCompleted(ft, inv, "inv-4")
		if msg := ft.text(); !strings.Contains(msg, `sagatest: invoice/inv-4 at +21d: got running, state {"Customer":"dee","Due":70,"Reminders":2,`) ||
			!strings.Contains(msg, "timeout sagatest_test.writeOff due +30d, want completed") {
			t.Errorf("AssertCompleted failure reads:\n%s", msg)
		}

		ft = &fakeT{TB: t}
		sagatest.AssertState(ft, env, inv, "nobody", invoice{})
		if len(ft.errors) != 1 || !ft.fatal {
			t.Errorf("AssertState of a missing instance: got %d failures (fatal %t), want one fatal:\n%s", len(ft.errors), ft.fatal, ft.text())
		}

		ft = &fakeT{TB: t}
		sagatest.State(ft, env, inv, "nobody")
		if msg := ft.text(); !ft.fatal || !strings.HasPrefix(msg, "sagatest: invoice/nobody at +21d: no instance\n") {
			t.Errorf("State of a missing instance: fatal %t, reads:\n%s", ft.fatal, msg)
		}
		env.Advance(9 * day)
	})
}

// A saga whose handler fails: retried at once, then after delays on the
// virtual clock, then dead-lettered.
type (
	Flaky    struct{ ID string }
	flakyRun struct{ Attempts int }
)

var errFlaky = errors.New("downstream unavailable")

func TestRetriesAndDeadLetters(t *testing.T) {
	flaky := saga.Define[flakyRun]("flaky")
	var calls atomic.Int32 // handlers run on the dispatcher's goroutine
	saga.StartedBy(flaky, saga.By(func(m Flaky) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[flakyRun], m Flaky) error {
			calls.Add(1)
			return errFlaky
		})
	sagatest.Run(t, []saga.Saga{flaky}, func(t *testing.T, env *sagatest.Env) {
		env.Send(Flaky{ID: "f-1"})
		if n := calls.Load(); n != 4 {
			t.Errorf("after the first delivery: got %d calls, want 4 (1 + 3 immediate retries)", n)
		}
		env.Advance(time.Hour) // delayed retries after 10s, 20s, 40s
		if n := calls.Load(); n != 16 {
			t.Errorf("after an hour: got %d calls, want 16", n)
		}
		dls := env.DeadLetters()
		if len(dls) != 1 || dls[0].DeadLetterReason != saga.ReasonRetriesExhausted ||
			!strings.Contains(dls[0].DeadLetterDescription, errFlaky.Error()) {
			t.Fatalf("dead letters: got %+v, want one with reason %s", dls, saga.ReasonRetriesExhausted)
		}
		if got, want := dls[0].EnqueuedAt.Sub(env.Start()), 70*time.Second; got != want {
			t.Errorf("dead-lettered at +%v, want +%v", got, want)
		}
		j := env.Journal()
		for _, want := range []string{
			"+0s        flaky/f-1: sagatest_test.Flaky retried: saga flaky/f-1: handling sagatest_test.Flaky: downstream unavailable\n",
			"+30s       flaky/f-1: sagatest_test.Flaky retried: ",
			"+1m10s     flaky/f-1: sagatest_test.Flaky dead-lettered\n",
			"+1m10s     dead-lettered sagatest_test.Flaky: RetriesExhausted: saga flaky/f-1: handling sagatest_test.Flaky: downstream unavailable\n",
		} {
			if !strings.Contains(j, want) {
				t.Errorf("journal lacks %q; it reads:\n%s", want, j)
			}
		}
	}, sagatest.WithDispatcherOptions(saga.WithRetry(saga.RetryPolicy{Immediate: 3, Delayed: 3})))
}

func TestUnknownMessageIsDeadLettered(t *testing.T) {
	type Stray struct{ X int }
	sagatest.Run(t, []saga.Saga{invoiceSaga()}, func(t *testing.T, env *sagatest.Env) {
		env.Send(Stray{X: 1})
		dls := env.DeadLetters()
		if len(dls) != 1 || dls[0].DeadLetterReason != saga.ReasonUnknownType {
			t.Fatalf("dead letters: got %+v, want one with reason %s", dls, saga.ReasonUnknownType)
		}
	})
}

func TestWithStart(t *testing.T) {
	start := time.Date(2026, time.March, 1, 9, 0, 0, 0, time.UTC)
	sagatest.Run(t, []saga.Saga{invoiceSaga()}, func(t *testing.T, env *sagatest.Env) {
		if !env.Now().Equal(start) || !env.Start().Equal(start) {
			t.Errorf("Now %v, Start %v: want both %v", env.Now(), env.Start(), start)
		}
		env.Send(InvoiceIssued{Invoice: "inv-5", Amount: 1})
		env.Advance(30 * day)
		if m := env.Messages("billing"); len(m) != 3 || !m[2].EnqueuedAt.Equal(start.Add(30*day)) {
			t.Errorf("got %d messages, the last at %v; want 3, the last at %v", len(m), m[len(m)-1].EnqueuedAt, start.Add(30*day))
		}
	}, sagatest.WithStart(start), sagatest.WithQueues("billing"))
}

// BenchmarkThirtyDayScenario measures one full 30-day invoice scenario
// (thirtyDays: 12 assertions, 4 steps, 3 timeouts) in a fresh Env, inside
// a test that inTest provides (synctest bubbles need a *testing.T).
func BenchmarkThirtyDayScenario(b *testing.B) {
	inv := invoiceSaga()
	inTest(b, func(t *testing.T) {
		for b.Loop() {
			sagatest.Run(t, []saga.Saga{inv}, func(t *testing.T, env *sagatest.Env) {
				thirtyDays(t, env, inv)
			})
		}
	})
}

// TestAssertCompletedAfterRetention: an instance that completed is
// still asserted completed once its tombstone is gone (after
// saga.DefaultRetention), and not running.
func TestAssertCompletedAfterRetention(t *testing.T) {
	inv := invoiceSaga()
	sagatest.Run(t, []saga.Saga{inv}, func(t *testing.T, env *sagatest.Env) {
		env.Send(InvoiceIssued{Invoice: "inv-11", Customer: "fay", Amount: 10})
		env.Send(PaymentReceived{Invoice: "inv-11", Amount: 10})
		env.AssertCompleted(t, inv, "inv-11")
		env.Advance(saga.DefaultRetention + day)
		if _, err := env.Dispatcher().Instance(t.Context(), "invoice", "inv-11"); !errors.Is(err, saga.ErrNotFound) {
			t.Fatalf("Instance after the retention: %v; want ErrNotFound (the tombstone gone)", err)
		}
		ft := &fakeT{TB: t}
		env.AssertCompleted(ft, inv, "inv-11")
		if msg := ft.text(); msg != "" {
			t.Errorf("AssertCompleted after the retention failed: %s", msg)
		}
		ft = &fakeT{TB: t}
		env.AssertRunning(ft, inv, "inv-11")
		if msg := ft.text(); !strings.Contains(msg, "got completed") {
			t.Errorf("AssertRunning after the retention: %q; want it to fail with got completed", msg)
		}
		// Never started: still no instance.
		ft = &fakeT{TB: t}
		env.AssertCompleted(ft, inv, "inv-12")
		if msg := ft.text(); !strings.Contains(msg, "got no instance") {
			t.Errorf("AssertCompleted of an instance never started: %q; want got no instance", msg)
		}
	})
}
