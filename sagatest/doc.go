// Package sagatest runs sagas in tests on a virtual clock: a month of
// timeouts in milliseconds.
//
// [Run] starts an [Env] inside a testing/synctest bubble: the real
// saga.Dispatcher, running the same saga definitions as production, on
// the in-memory transport (transport.NewMemory), the in-memory store
// (memstore) and the transport's timeout engine, where a timeout is a
// scheduled message. Time in the bubble is virtual: it moves only when
// the test waits, and then straight to the next timer, so timeouts fire
// at their due time, in order, however far away it is. time.Now and
// Context.Now in handlers read the virtual clock.
//
// Continuing the TwoFactor saga of the saga package's documentation:
//
//	func TestCodeExpires(t *testing.T) {
//		sagatest.Run(t, []saga.Saga{TwoFactor}, func(t *testing.T, env *sagatest.Env) {
//			env.Send(CodeRequested{User: "ann", Code: "123456"})
//			env.Advance(5*time.Minute - time.Second)
//			sagatest.AssertState(t, env, TwoFactor, "ann", OTP{Code: "123456"})
//
//			env.Advance(time.Second) // virtual: returns at once
//			env.AssertCompleted(t, TwoFactor, "ann")
//			env.AssertSent(t, "notifications", CodeExpired{User: "ann"})
//		})
//	}
//
// # Driving
//
// [Env.Send] sends a message to the dispatcher's queue ([Queue]) and
// returns once it has been handled. [Env.Advance] and [Env.AdvanceTo] move
// the clock and return once everything due by then has been handled. (A
// plain time.Sleep works too; call [Env.Settle] after it.)
// [Env.Dispatcher] hands the dispatcher to code under test that starts
// sagas itself.
//
// The rules of time, as in NServiceBus.Testing:
//
//   - every timeout that comes due during one Advance fires within it, at
//     its own virtual time, in due order — and so do the timeouts their
//     handlers request, if due before the Advance ends (chained
//     timeouts), and delayed retries;
//   - a timeout requested for a time already past is handled at once, at
//     the current virtual time;
//   - the clock only moves forward: a negative Advance, or AdvanceTo a
//     past time, fails the test;
//   - a timeout whose handler fails is not lost: it is retried as any
//     message is (saga.RetryPolicy), then dead-lettered;
//   - the dispatcher may run at most [DefaultStepBudget] steps during one
//     call of Send, Advance, AdvanceTo or Settle ([WithStepBudget]): a
//     handler that keeps requesting timeouts that are already due would
//     otherwise hang the test, since virtual time moves only when every
//     goroutine waits. Beyond it the Env stops the dispatcher and fails
//     the test, with the journal;
//   - timeouts (and messages) ready at the same instant are served
//     round-robin across their PartitionKeys — a saga's timeouts carry
//     its instance's key (saga.PartitionKeyBy) — the keys taken by their
//     earliest due time, then by name, each key's messages in queue order;
//     [Env.ServedKeys] tells the order in which keys were served.
//
// The dispatcher runs one step at a time, in queue order (round-robin
// across keys for what is ready at once), so a run is deterministic. Its
// options, the codec and the start time can be changed with
// [WithDispatcherOptions], [WithCodec] and [WithStart].
//
// # Time
//
// The virtual clock starts on Monday 1 January 2024, 00:00 UTC, unless
// [WithStart] says otherwise: a weekday, so that a saga counting business
// days does not start on a weekend by accident, and a recent date, so
// that time zones' rules and calendars' holidays are today's. (Before,
// the clock started at the bubble's epoch, Saturday 1 January 2000.) New
// Year's Day is a holiday in many calendars: a test of business days
// usually picks its own start with WithStart, and should.
//
// [Env.Now] and a handler's Context.Now return the same instant, in UTC,
// without a monotonic reading. [WithCalendars] gives the dispatcher a
// calendar registry, for timeouts requested by a calendar rule
// (saga.Context.RequestTimeoutBy) and their re-plans. Time zones come from
// time.LoadLocation: import time/tzdata in the test to pin the zone
// database to the Go release rather than the machine's.
//
// [Env.Outage] simulates an outage: the clock moves on while nothing is
// handled, then the backlog arrives in due order, at the time the outage
// ends — which is how a test sees its timeouts' catch-up policies
// (saga.CatchUp, saga.HandleLate) at work, in milliseconds:
//
//	env.Send(Subscribe{ID: "a"})  // a reminder due in an hour
//	env.Outage(3 * time.Hour)     // handled two hours late, by its policy
//
// # Exploring races
//
// Saga bugs live in races: a payment arriving at the instant the deadline
// fires, a resend racing the expiry, a message redelivered after a
// crash. [Explore] runs a scenario once for each order in which a set of
// concurrent inputs — [Send], [Timeout], [Redeliver] — can arrive at one
// instant, each time in a fresh Env, and checks the outcome after each:
//
//	func TestPaymentAtTheDeadline(t *testing.T) {
//		sagatest.Explore(t, []saga.Saga{Order},
//			func(t *testing.T, env *sagatest.Env) { // before the race
//				env.Send(OrderPlaced{Order: "o1"}) // its deadline is due in an hour
//			},
//			[]sagatest.Input{ // at one instant, in every order
//				sagatest.Timeout(Order, "o1"),
//				sagatest.Send(PaymentArrived{Order: "o1"}),
//			},
//			func(t *testing.T, env *sagatest.Env) { // the invariant
//				shipped := len(sagatest.Sent[Shipped](env, "shipping"))
//				cancelled := len(sagatest.Sent[Cancelled](env, "shipping"))
//				if shipped+cancelled != 1 {
//					t.Errorf("shipped %d, cancelled %d: want one of them", shipped, cancelled)
//				}
//			})
//	}
//
// A failing order is reported with the journal of its run and the option
// that re-runs it alone, the same way every time:
//
//	sagatest: Explore at order_test.go:12: order 2 of 2 failed:
//	  1. timeout sagatest_test.payDeadline of order/o1, due +1h0m0s
//	  2. send sagatest_test.PaymentArrived {"Order":"o1"}
//	re-run it alone with the option sagatest.Replay(1, 0)
//	journal (now +1h0m0s): ...
//
// [Timeout] names the earliest pending timeout of an instance;
// [TimeoutOf] the earliest of one payload type.
//
// [Crash] makes the dispatcher die in an input's step, [BeforeCommit],
// [BeforeOutboxCleared] or [BeforeAck], and explores the message's
// redelivery in every position after it: what a crash does to the
// invariants. A side effect a handler has outside its Context (a call to
// another service) happens twice after a crash before commit.
//
// Explore runs every order of up to 6 inputs (720), and a sample drawn
// with a fixed seed beyond ([WithOrderings], [WithSeed]). Each order costs
// about what a Run of the same scenario costs (BenchmarkExplore: about
// 0.2 ms for a setup of one message and two inputs).
//
// # Changing a saga
//
// A new version of a saga (saga.DataVersion, saga.Aliased) must take
// over what the old one left pending: records, timeouts, messages.
// Record them from the old version once, as golden files —
// [Env.StoredRecord], and the messages of [Env.Messages] or of the
// queue's scheduled timeouts — and keep them in testdata; a test then
// loads them under the new version with [Env.Restore] and [Env.Deliver],
// and [AssertDecodes] checks that a recorded payload decodes as the new
// type. [State] and [AssertState] upcast the data to the definition's
// version, as handlers see it. The guide docs/evolving.md of the
// repository walks through it.
//
// # Looking
//
//   - [State], [AssertState]: an instance's data, decoded;
//     [Env.AssertCompleted], [Env.AssertRunning], [Env.Completed],
//     [Env.Exists];
//
//   - [Env.Timeouts]: an instance's pending timeouts and their due times;
//
//   - [Env.Find]: the running instances an index value finds (saga.Index,
//     saga.Where), in ID order;
//
//   - [Sent], [Env.AssertSent], [Env.Messages]: the messages sent to a
//     queue, decoded or raw (with Seq and EnqueuedAt), in order. Nothing
//     receives from these queues in the Env, so they keep everything;
//
//   - [Env.DeadLetters]: what the dispatcher dead-lettered, with the
//     reason;
//
//   - [Env.Journal]: a timeline of all of it.
//
// Assertion failures say what they got and wanted, and print the journal:
//
//	+0s        test sent sagatest_test.CodeRequested {"User":"ann","Code":"123456"}
//	+0s        twofactor/ann: sagatest_test.CodeRequested handled, started
//	+0s          state {"Code":"123456","Attempts":0}
//	+0s          timeout sagatest_test.Expired requested, due +5m0s
//	+5m0s      twofactor/ann: timeout sagatest_test.Expired handled, completed
//	+5m0s      sent sagatest_test.CodeExpired to notifications {"User":"ann"}
//
// Assertions compare with reflect.DeepEqual, except for times: two
// time.Time values are equal if they are the same instant, whatever their
// location or monotonic reading. Data and messages come back from JSON in
// UTC, and handlers' Context.Now, [Env.Now] and [Env.Start] return UTC; a
// time in another location compares equal at the same instant.
//
// When the test function returns, Run stops the dispatcher and fails the
// test if a message was dead-lettered, or is still waiting for a delayed
// retry, and the test never looked ([Env.DeadLetters], [Env.Failures]) —
// naming the call of the test (Send, Advance, ... with its file and line)
// during which the step failed — or if a timeout is still scheduled for
// an instance that completed or no longer waits for it, or if an instance
// of a saga with saga.CheckLiveness is stuck: running, with no pending
// timeout and no expected message ([Env.Stuck]).
//
// # Limits
//
// The bubble's rules (package testing/synctest, Go 1.25 or later) apply:
//
//   - Run needs a *testing.T. Benchmarks and Example functions have none,
//     which is why this package has no runnable examples; the example
//     above is TestCodeExpires in example_test.go.
//     BenchmarkThirtyDayScenario in sagatest_test.go shows how a benchmark
//     can get one.
//   - Call the Env's methods from the test's goroutine, and do not call
//     t.Parallel or t.Run on the t that Run passes (call Run inside each
//     subtest instead).
//   - Everything must be in memory. A goroutine blocked on a real socket
//     or a system call is not "durably blocked", so the Env cannot settle
//     while it waits, and virtual time stops; a handler that never
//     returns hangs the test. NATS, the JetStream transport and kvstore
//     cannot run in a bubble — an embedded nats-server stalls it, since
//     one of its goroutines waits on a channel created at package init,
//     outside the bubble. Test those in real time, as the examples'
//     demo tests do.
//   - A goroutine still blocked when the test function returns fails the
//     test: stop what you start.
//   - Share variables between handlers and the test through sync/atomic or
//     a mutex: the race detector does not take virtual time passing for
//     synchronization.
//
// And the Env's own:
//
//   - The Env runs its own receive loop, which hands each message to
//     saga.Dispatcher.Handle, instead of Dispatcher.Run: so it can count
//     steps and hold messages back for Explore. Steps are bounded by 30
//     seconds of virtual time, whatever saga.WithDrainTimeout says.
//   - Hooks given with saga.WithHooks in WithDispatcherOptions are called,
//     then the Env's, which write the journal.
//   - Env.Send gives each message a MessageID (sagatest-<env>-1,
//     sagatest-<env>-2, ..., <env> random for each Env) unless its options
//     set one, so that Explore can redeliver it; no two Envs share one, so
//     a record restored from another Env (Env.Restore) does not take a
//     message sent here for a duplicate.
//   - Timeouts due at the very same instant are scheduled on timers that
//     fire together; the order in which the dispatcher then takes them is
//     not fixed. When it matters, make them Explore's inputs.
//   - Explore delivers its inputs one at a time, each with what it causes
//     at that instant before the next: it explores the order of the
//     inputs, not of their consequences among themselves. Timeout inputs
//     due earlier than the latest one wait for it.
//   - The journal shows every message a step sends to a queue, under the
//     step; a queue that only code outside the sagas sends to (through
//     Env.Dispatcher) shows from the first Sent, Messages or AssertSent
//     naming it, or from the start with [WithQueues].
//   - The journal shows a body or a state of at most [DefaultJournalLimit]
//     bytes as it is, a longer one as its size, "state (283 bytes)"
//     ([WithJournalLimit] changes it).
//   - A message handled by several sagas appears in the journal under the
//     last of them.
package sagatest
