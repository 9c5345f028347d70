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
// the clock and return once everything due by then has been handled:
// timeouts, the timeouts their handlers request, delayed retries. (A plain
// time.Sleep works too; call [Env.Settle] after it.) [Env.Dispatcher]
// hands the dispatcher to code under test that starts sagas itself.
//
// The dispatcher runs one step at a time, in queue order, so a run is
// deterministic. Its options, the codec and the start time can be changed
// with [WithDispatcherOptions], [WithCodec] and [WithStart].
//
// # Looking
//
//   - [State], [AssertState]: an instance's data, decoded;
//     [Env.AssertCompleted], [Env.AssertRunning], [Env.Completed],
//     [Env.Exists];
//
//   - [Env.Timeouts]: an instance's pending timeouts and their due times;
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
// When the test function returns, Run stops the dispatcher and fails the
// test if a message was dead-lettered and the test never called
// DeadLetters, or if a timeout is still scheduled for an instance that
// completed or no longer waits for it.
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
//     returns hangs the test. NATS, the JetStream transport, kvstore and
//     Temporal cannot run in a bubble — an embedded nats-server stalls it,
//     since one of its goroutines waits on a channel created at package
//     init, outside the bubble. Test those in real time.
//   - A goroutine still blocked when the test function returns fails the
//     test: stop what you start.
//   - Share variables between handlers and the test through sync/atomic or
//     a mutex: the race detector does not take virtual time passing for
//     synchronization.
//
// And the Env's own:
//
//   - The Env uses the dispatcher's hooks (saga.WithHooks) to write the
//     journal; hooks passed in WithDispatcherOptions replace them.
//   - The journal shows messages sent to a queue once the Env watches it:
//     from the first Sent, Messages or AssertSent naming it, earlier ones
//     included, or from the start with [WithQueues].
//   - A message handled by several sagas appears in the journal under the
//     last of them.
package sagatest
