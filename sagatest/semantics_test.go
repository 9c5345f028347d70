package sagatest_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/sagatest"
)

// The rules of time that tests rely on, as NServiceBus.Testing states
// them, and the Env's own defects once found.

// clockwork's instance starts with Begin, which requests the timeouts
// Begin.Plan names (offsets from now; negative ones are already due);
// each handled timeout is logged in the state with its virtual time, and
// may request more (Then, after its handling).
type (
	Begin struct {
		ID   string
		Plan []Tick
	}
	Tick struct {
		Name  string
		After time.Duration
		Then  []Tick
	}
	clock struct {
		Log []string // "name@offset", in handling order
	}
	Stamp struct {
		At time.Time
	}
	StampMe struct{ ID string }
)

func clockwork(start *time.Time, fail func(name string) error) *saga.Definition[clock] {
	d := saga.Define[clock]("clockwork")
	request := func(c *saga.Context[clock], ticks []Tick) error {
		for _, tk := range ticks {
			if _, err := c.RequestTimeoutAt(c.Now().Add(tk.After), tk); err != nil {
				return err
			}
		}
		return nil
	}
	saga.StartedBy(d, saga.By(func(m Begin) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[clock], m Begin) error {
			return request(c, m.Plan)
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[clock], tk Tick) error {
		if fail != nil {
			if err := fail(tk.Name); err != nil {
				return err
			}
		}
		c.Data.Log = append(c.Data.Log, fmt.Sprintf("%s@%v", tk.Name, c.Now().Sub(*start)))
		return request(c, tk.Then)
	})
	saga.Handles(d, saga.By(func(m StampMe) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[clock], m StampMe) error {
			c.MarkComplete()
			return c.Send("stamps", Stamp{At: c.Now()})
		})
	return d
}

func runClockwork(t *testing.T, fail func(string) error, f func(t *testing.T, env *sagatest.Env, d *saga.Definition[clock]), opts ...sagatest.Option) {
	t.Helper()
	var start time.Time
	d := clockwork(&start, fail)
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		start = env.Start()
		f(t, env, d)
	}, opts...)
}

func TestTimeoutsDueDuringOneAdvanceFireInOrderWithTheirChains(t *testing.T) {
	runClockwork(t, nil, func(t *testing.T, env *sagatest.Env, d *saga.Definition[clock]) {
		env.Send(Begin{ID: "c1", Plan: []Tick{
			{Name: "C", After: 3 * time.Hour},
			{Name: "A", After: time.Hour, Then: []Tick{
				{Name: "B", After: 30 * time.Minute, Then: []Tick{{Name: "B-now", After: 0}}},
			}},
		}})
		env.Advance(4 * time.Hour) // one call
		sagatest.AssertState(t, env, d, "c1", clock{Log: []string{"A@1h0m0s", "B@1h30m0s", "B-now@1h30m0s", "C@3h0m0s"}})
		if got := env.Timeouts(d, "c1"); got != nil {
			t.Errorf("pending timeouts after 4h: got %v, want nil", got)
		}
	})
}

func TestTimeoutRequestedInThePastIsHandledNow(t *testing.T) {
	runClockwork(t, nil, func(t *testing.T, env *sagatest.Env, d *saga.Definition[clock]) {
		env.Advance(10 * time.Minute)
		env.Send(Begin{ID: "c1", Plan: []Tick{{Name: "late", After: -time.Hour}}})
		sagatest.AssertState(t, env, d, "c1", clock{Log: []string{"late@10m0s"}})
	})
}

func TestTimeoutIsRetriedWhenItsHandlerFails(t *testing.T) {
	var calls atomic.Int32
	fail := func(name string) error {
		if calls.Add(1) <= 5 { // the first delivery (1 + 3 immediate retries) and one more
			return errors.New("flaky")
		}
		return nil
	}
	runClockwork(t, fail, func(t *testing.T, env *sagatest.Env, d *saga.Definition[clock]) {
		env.Send(Begin{ID: "c1", Plan: []Tick{{Name: "T", After: time.Hour}}})
		env.Advance(time.Hour)
		sagatest.AssertState(t, env, d, "c1", clock{})
		env.Advance(10 * time.Second) // the first delayed retry
		sagatest.AssertState(t, env, d, "c1", clock{Log: []string{"T@1h0m10s"}})
		fs := env.Failures()
		if len(fs) != 1 || fs[0].Outcome != saga.Retried || !strings.Contains(fs[0].Err.Error(), "flaky") ||
			!strings.HasPrefix(fs[0].Caller, "Env.Advance at semantics_test.go:") {
			t.Errorf("failures: got %+v, want one retried, during the first Advance", fs)
		}
	}, sagatest.WithDispatcherOptions(saga.WithRetry(saga.RetryPolicy{Immediate: 3, Delayed: 3})))
}

func TestTimeoutsIsNilForACompletedInstance(t *testing.T) {
	runClockwork(t, nil, func(t *testing.T, env *sagatest.Env, d *saga.Definition[clock]) {
		env.Send(Begin{ID: "c1", Plan: []Tick{{Name: "T", After: time.Hour}}})
		env.Send(StampMe{ID: "c1"})
		env.AssertCompleted(t, d, "c1")
		if got := env.Timeouts(d, "c1"); got != nil {
			t.Errorf("Timeouts of a completed instance: got %#v, want nil", got)
		}
		if got := env.Timeouts(d, "nobody"); got != nil {
			t.Errorf("Timeouts of a missing instance: got %#v, want nil", got)
		}
	})
}

func TestEqualInstantsCompareEqual(t *testing.T) {
	runClockwork(t, nil, func(t *testing.T, env *sagatest.Env, d *saga.Definition[clock]) {
		env.Advance(90 * time.Minute)
		now := env.Now()
		env.Send(Begin{ID: "c1"})
		env.Send(StampMe{ID: "c1"})
		// The handler's c.Now() comes back from JSON in UTC; the same
		// instant from the virtual clock, or in another location, is equal.
		env.AssertSent(t, "stamps", Stamp{At: now})
		env.AssertSent(t, "stamps", Stamp{At: now.In(time.FixedZone("CET", 3600))})
		env.AssertSent(t, "stamps", Stamp{At: time.Date(2024, 1, 1, 2, 30, 0, 0, time.FixedZone("CET", 3600))})
		if loc := env.Now().Location(); loc != time.UTC {
			t.Errorf("Env.Now: got location %v, want UTC", loc)
		}
		if s := env.Now().String(); strings.Contains(s, "m=") {
			t.Errorf("Env.Now: got %s, with a monotonic reading", s)
		}
		ft := &fakeT{TB: t}
		env.AssertSent(ft, "stamps", Stamp{At: now.Add(time.Nanosecond)})
		if len(ft.errors) != 1 {
			t.Errorf("a different instant: got %d failures, want 1", len(ft.errors))
		}
	})
}

func TestEqualInstantsInState(t *testing.T) {
	type when struct{ At time.Time }
	d := saga.Define[when]("when")
	saga.StartedBy(d, saga.By(func(m StampMe) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[when], m StampMe) error {
			c.Data.At = c.Now()
			return nil
		})
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(StampMe{ID: "w"})
		sagatest.AssertState(t, env, d, "w", when{At: env.Now()})
		// The same instant in another location: the machine's own, and
		// fixed zones east and west of UTC (the bubble starts at midnight
		// 1 January 2024 UTC), so the check holds in any TZ.
		sagatest.AssertState(t, env, d, "w", when{At: env.Now().In(time.Local)})
		sagatest.AssertState(t, env, d, "w", when{At: time.Date(2024, 1, 1, 5, 30, 0, 0, time.FixedZone("IST", 5*3600+1800))})
		sagatest.AssertState(t, env, d, "w", when{At: time.Date(2023, 12, 31, 19, 0, 0, 0, time.FixedZone("EST", -5*3600))})
		ft := &fakeT{TB: t}
		sagatest.AssertState(ft, env, d, "w", when{At: env.Now().Add(time.Nanosecond)})
		if len(ft.errors) != 1 {
			t.Errorf("a different instant: got %d failures, want 1", len(ft.errors))
		}
	})
}

func TestUserHooksAreCalledAndTheJournalStillRecords(t *testing.T) {
	var started, done atomic.Int32
	var last atomic.Value
	hooks := saga.Hooks{
		StepStarted: func(ctx context.Context, info saga.StepInfo) context.Context {
			started.Add(1)
			return ctx
		},
		StepDone: func(ctx context.Context, info saga.StepInfo, res saga.StepResult) {
			done.Add(1)
			last.Store(string(res.Outcome))
		},
	}
	runClockwork(t, nil, func(t *testing.T, env *sagatest.Env, d *saga.Definition[clock]) {
		env.Send(Begin{ID: "c1", Plan: []Tick{{Name: "T", After: time.Hour}}})
		env.Advance(time.Hour)
		if s, dn := started.Load(), done.Load(); s != 2 || dn != 2 {
			t.Errorf("user hooks: StepStarted called %d times, StepDone %d; want 2 and 2", s, dn)
		}
		if o, _ := last.Load().(string); o != string(saga.Handled) {
			t.Errorf("user StepDone: last outcome %q, want %q", o, saga.Handled)
		}
		if j := env.Journal(); !strings.Contains(j, "+1h0m0s    clockwork/c1: timeout sagatest_test.Tick handled\n") {
			t.Errorf("journal with user hooks:\n%s", j)
		}
	}, sagatest.WithDispatcherOptions(saga.WithHooks(hooks)))
}

func TestNegativeAdvanceFailsTheTest(t *testing.T) {
	out := expectFailure(t, func(t *testing.T) {
		runClockwork(t, nil, func(t *testing.T, env *sagatest.Env, d *saga.Definition[clock]) {
			env.Advance(time.Minute)
			env.Advance(-time.Second)
			t.Error("Advance(-1s) returned")
		})
	})
	if !regexp.MustCompile(`semantics_test.go:\d+: sagatest: Advance\(-1s\): negative duration; the virtual clock only moves forward \(now \+1m0s\)`).MatchString(out) ||
		strings.Contains(out, "returned") {
		t.Errorf("the test's output:\n%s", out)
	}
}

func TestStepBudgetStopsAHandlerThatKeepsRequestingDueTimeouts(t *testing.T) {
	// A tick that requests itself again at once, forever.
	forever := Tick{Name: "again", After: 0}
	out := expectFailure(t, func(t *testing.T) {
		loop := saga.Define[struct{}]("loop")
		saga.StartedBy(loop, saga.By(func(m StampMe) string { return m.ID }),
			func(ctx context.Context, c *saga.Context[struct{}], m StampMe) error {
				_, err := c.RequestTimeout(0, forever)
				return err
			})
		saga.OnTimeout(loop, func(ctx context.Context, c *saga.Context[struct{}], m Tick) error {
			_, err := c.RequestTimeout(0, forever)
			return err
		})
		sagatest.Run(t, []saga.Saga{loop}, func(t *testing.T, env *sagatest.Env) {
			env.Advance(time.Minute)
			env.Send(StampMe{ID: "loop"})
			t.Error("Send returned")
		}, sagatest.WithStepBudget(500))
	})
	for _, want := range []string{
		"semantics_test.go:",
		"sagatest: the dispatcher ran 500 steps during Env.Send at semantics_test.go:",
		"lines left out (Env.Journal has them all) …\n",
		"without the test moving on, and was stopped at +1m0s: does a handler keep requesting timeouts that are already due",
		"WithStepBudget",
		"journal (now +1m0s):",
		"loop/loop: timeout sagatest_test.Tick handled",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the test's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Send returned") {
		t.Errorf("Send returned:\n%s", out)
	}
}

func TestAFailedStepIsReportedWithItsTestLineAndTheJournal(t *testing.T) {
	boom := func(name string) error {
		if name == "boom" {
			return errors.New("no such customer")
		}
		return nil
	}
	out := expectFailure(t, func(t *testing.T) {
		runClockwork(t, boom, func(t *testing.T, env *sagatest.Env, d *saga.Definition[clock]) {
			env.Send(Begin{ID: "c1", Plan: []Tick{{Name: "boom", After: time.Hour}}})
			env.Send(Begin{ID: "c2", Plan: []Tick{{Name: "boom", After: 2 * time.Hour}}})
			env.Advance(time.Hour) // c1's timeout fails and is dead-lettered
			env.Advance(time.Hour) // and then c2's
		}, sagatest.WithDispatcherOptions(saga.WithRetry(saga.RetryPolicy{Immediate: -1, Delayed: 0})))
	})
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`sagatest: at the end of the test:\n\s+` +
			`2 message\(s\) dead-lettered, which the test did not look at \(Env.DeadLetters\):\n\s+` +
			`sagatest_test.Tick at \+1h0m0s: RetriesExhausted: saga clockwork/c1: handling sagatest_test.Tick: no such customer \(during Env.Advance at semantics_test.go:\d+\)\n`),
		regexp.MustCompile(`\s+sagatest_test.Tick at \+2h0m0s: RetriesExhausted: saga clockwork/c2: handling sagatest_test.Tick: no such customer \(during Env.Advance at semantics_test.go:\d+\)\n`),
		regexp.MustCompile(`journal \(now \+2h0m0s\):\n(.*\n)*\s+\+1h0m0s +clockwork/c1: sagatest_test.Tick dead-lettered\n`),
	} {
		if !want.MatchString(out) {
			t.Errorf("the test's output does not match %s:\n%s", want, out)
		}
	}
}

func TestAStepWaitingForARetryIsReported(t *testing.T) {
	out := expectFailure(t, func(t *testing.T) {
		runClockwork(t, func(string) error { return errors.New("down") }, func(t *testing.T, env *sagatest.Env, d *saga.Definition[clock]) {
			env.Send(Begin{ID: "c1", Plan: []Tick{{Name: "T", After: time.Hour}}})
			env.Advance(time.Hour)
		}, sagatest.WithDispatcherOptions(saga.WithRetry(saga.RetryPolicy{Immediate: -1, Delayed: 1})))
	})
	want := regexp.MustCompile(`sagatest_test.Tick failed and waits for a delayed retry at \+1h0m10s, which the test did not look at \(Env.Failures\): ` +
		`saga clockwork/c1: handling sagatest_test.Tick: down \(during Env.Advance at semantics_test.go:\d+\)\n`)
	if !want.MatchString(out) {
		t.Errorf("the test's output does not match %s:\n%s", want, out)
	}
}

// A handler asking for a timeout no OnTimeout handles: saga refuses it at
// RequestTimeout; the step fails, and the test says during which call.
func TestATimeoutWithoutHandlerIsReportedAtItsTestLine(t *testing.T) {
	type unhandled struct{}
	out := expectFailure(t, func(t *testing.T) {
		d := saga.Define[struct{}]("careless")
		saga.StartedBy(d, saga.By(func(m StampMe) string { return m.ID }),
			func(ctx context.Context, c *saga.Context[struct{}], m StampMe) error {
				_, err := c.RequestTimeout(time.Hour, unhandled{})
				return err
			})
		sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
			env.Send(StampMe{ID: "c1"})
		})
	})
	want := regexp.MustCompile(`sagatest_test.StampMe at \+0s: \w+: .*unhandled.* \(during Env.Send at semantics_test.go:\d+\)\n(.*\n)*\s+journal \(now \+0s\):\n`)
	if !want.MatchString(out) {
		t.Errorf("the test's output does not match %s:\n%s", want, out)
	}
}
