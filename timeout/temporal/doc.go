// Package temporal is a timeout engine on Temporal, for timeouts days or
// months away: one small workflow per timeout, which waits on a durable
// timer and then delivers the timeout's message to its transport queue.
// It is a module of its own (github.com/jetsaga/jetsaga/timeout/temporal),
// so that a service that never uses Temporal does not depend on its SDK.
//
// The same saga definition runs on either engine: a timeout.Router sends
// each timeout to JetStream or to Temporal by its delay (Route.Beyond) or
// its saga type (Route.Sagas), and Cancel and listings to whichever
// engine holds it.
//
// # Setting up
//
// A service that schedules timeouts on Temporal needs a client, the
// engine, and a worker — inside the service next to its dispatcher, as
// here, or in a process of its own (see [Worker]):
//
//	c, err := client.Dial(client.Options{HostPort: "temporal:7233", Namespace: "loans"})
//	engine, err := temporal.New(c, temporal.WithBroker(broker))
//	w, err := temporal.NewWorker(c, broker) // delivers on broker
//	go w.Run(ctx)
//
//	router := &timeout.Router{
//		Default: timeout.NewQueue(broker),                  // JetStream
//		Routes:  []timeout.Route{engine.Route(24 * time.Hour)}, // Temporal beyond a day
//	}
//	d, err := saga.NewDispatcher(broker, store, "loans", saga.WithSagas(Loan), saga.WithTimeouts(router))
//
// The namespace is the client's (client.Options.Namespace); the task
// queue is [DefaultTaskQueue] unless [WithTaskQueue] says otherwise, on
// the engine and its workers alike. [Register] registers the workflow and
// the activity on a worker you already run instead.
//
// # Worker pollers
//
// [NewWorker] polls workflow and activity tasks with Temporal's poller
// autoscaling (worker.NewPollerBehaviorAutoscaling), not the SDK's
// default of 2 fixed pollers: [DefaultInitialPollers] (5) of each kind to
// start with, scaled between [DefaultMinPollers] (1) and
// [DefaultMaxPollers] (100) as the server asks. Every Cancel is a workflow
// task the worker must run within [WithCancelTimeout], so a burst of
// cancels needs pollers; and a worker with a fixed number of pollers
// shares them between its sticky queue and the task queue, and sends
// them all to the sticky queue for as long as that queue last reported a
// backlog — measured under load: the task queue went unpolled for 30 s,
// and the cancels of timeouts whose update Temporal had moved there
// (after it could not start on the sticky queue within 5 s) got no
// answer. Autoscaling gives each queue pollers of its own. Set other
// pollers with [WithWorkerOptions] (WorkflowTaskPollerBehavior,
// ActivityTaskPollerBehavior, or the MaxConcurrent…TaskPollers fields);
// on a worker you run yourself ([Register]), prefer autoscaling pollers
// for the same reasons. NewWorker also lets a workflow task run
// [DefaultDeadlockDetectionTimeout] (10 s, the task's own timeout) before
// the SDK calls it deadlocked, where the SDK's default is 1 s: on a CPU
// too busy to run a workflow goroutine for a second, the SDK's check
// fails the task, and the cancels wait for Temporal's retries of it.
//
// # How a timeout runs
//
// [Engine.Schedule] starts a workflow of type [WorkflowType] whose ID is
// derived from the timeout's queue and ID: "jetsaga/<engine>/<queue>/<ID>",
// the ID escaped (bytes other than [A-Za-z0-9._-] as %XX) or, beyond 200
// bytes escaped, replaced by its SHA-256, so that any ID is safe and the
// workflow ID stays short. The ID-conflict policy UseExisting and the
// reuse policy RejectDuplicate make Schedule idempotent: the same timeout
// scheduled again gets the same ref and starts nothing, whether it is
// pending, fired or cancelled — for as long as the namespace keeps the
// closed workflow (its retention period, a few days by default); after
// that, the same ID schedules a new timeout.
//
// The workflow waits on a durable timer (workflow.AwaitWithTimeout) until
// the due time, or until the cancel update comes. A wait under a second is
// the exception: a Temporal timer shorter than a second fires about a
// second after it started (measured on the dev server: 0.7-0.9 s late for
// a 300 ms wait, whether at the workflow's start or after an earlier
// timer, where timers of a second or more fire within 0.2 s), so the
// workflow runs the delivery activity at once and the activity waits for
// the due time itself, then asks the workflow with the update
// [UpdateDeliver] whether to send (see Cancel). Such a timeout is
// delivered tens of milliseconds after its due time, not up to a second;
// it costs one more workflow task (the update) than a timer.
//
// At the due time the workflow runs the delivery activity
// [ActivityDeliver], which sends the message —
// timeout.Timeout.DeliveryMessage, as every engine delivers — to the
// timeout's queue with [transport.Queue.Send]. The activity never sends
// before the due time by the worker's own clock (it waits the rest if the
// server's timer fired early by it), and it is retried until it succeeds
// (backoff from 1 s to a minute), except for a message the transport
// refuses ([ErrUndeliverable]; [WithBroker] refuses such messages at
// Schedule). Its send carries the timeout's ID as MessageID, so the
// queue's duplicate detection drops a second send: an activity retried
// after its worker died between the send and the activity's completion
// delivers once, as long as the retry comes within the queue's
// DuplicateWindow (default 10 minutes; a dead worker's attempt is retried
// after [WithDeliveryTimeout], 30 s by default).
//
// # Cancel
//
// [Engine.Cancel] sends the workflow a Temporal update, [UpdateCancel],
// and waits for its answer. The update is handled in workflow code,
// ordered in the workflow's history with the timer: before the delivery
// starts it cancels the timeout (nil: never delivered); once the delivery
// has started it answers that the timeout fired (timeout.ErrAlreadyFired:
// delivered, or about to be). A closed workflow answers from its result:
// fired (ErrAlreadyFired), cancelled (timeout.ErrNotFound), undeliverable
// (ErrNotFound and [ErrUndeliverable]); a workflow Temporal does not know
// (never scheduled, or closed longer ago than the retention) is
// ErrNotFound. Terminating the workflow could not tell whether the message
// went out; the update can.
//
// During a sub-second wait the delivery activity has started but not
// sent: at the due time (by its worker's clock) it sends [UpdateDeliver],
// and the workflow orders that update with the cancel update as it orders
// the timer. A Cancel handled before it cancels (nil: the activity is
// told so and sends nothing, and the workflow closes as cancelled once
// the activity returns, within the second); one handled after it answers
// ErrAlreadyFired, the message sent or about to be. So the window in which
// Cancel answers ErrAlreadyFired still opens at the due time, as with a
// timer, give or take the clocks of the worker and the server. An
// UpdateDeliver the workflow did not ask for (outside that wait) is
// rejected and changes nothing.
//
// Cancel of a pending timeout needs a worker running: the update is
// handled by workflow code, so Cancel waits for a worker to pick it up,
// up to [WithCancelTimeout] (30 s by default) or the context's deadline.
// Within that time Cancel sends its update again if the update failed
// without an answer while the workflow still runs, under the same update
// ID, which Temporal deduplicates: a resent update joins the one already
// waiting, and one answered before the workflow closed answers again.
// Any error other than these outcomes leaves the outcome unknown — an
// update that timed out may still be handled once a worker comes — and
// calling Cancel again is safe (it then reports ErrNotFound if the
// earlier update cancelled the timeout). A saga dispatcher keeps such a
// cancel among the step's pending effects and retries it.
//
// # Why a timer, not StartDelay
//
// Temporal can also delay a workflow's start on the server
// (StartWorkflowOptions.StartDelay) and run the delivery when it starts.
// The engine waits on a timer in a running workflow instead, because
// Cancel needs the workflow code to order the cancel against the firing:
// during a StartDelay no workflow code runs, a Signal waits for the delay
// to end (measured on the dev server: an hour-delayed workflow signalled
// stays delayed), and an update starts the workflow at once, which must
// then tell an early start from a due one and fall back to a timer
// anyway. A timer gives one path for every case. The price, measured
// with cmd/temporal-bench on a 2-core machine (dev server, worker in the
// same process): a timer workflow runs a workflow task when it is
// scheduled, so Schedule is slower — 290-410 timeouts/s against 400-630
// with StartDelay over several runs — while firing lateness is of the
// same order (p50 about 0.1 s for both; p99 0.2-1.2 s for timers and
// 0.3-0.7 s for StartDelay at 100 timeouts/s, 0.2 s and 0.14 s at 33/s).
//
// # Listing
//
// [Engine.Pending] (timeout.Lister) lists pending timeouts from
// Temporal's visibility store: the running workflows of [WorkflowType] on
// the engine's task queue and with its workflow ID prefix (the queue's,
// when the filter names one), read from their memos ([MemoKey]), so
// Dispatcher.ScheduledTimeouts and CancelAllTimeouts reach this engine
// too. By default saga and instance are filtered in the client, which
// works on every server without set-up but reads all the queue's pending
// timeouts; with [WithSearchAttributes] the engine sets the Keyword
// search attributes JetsagaQueue, JetsagaSaga and JetsagaInstance and the
// store filters on them (register them first: [RegisterSearchAttributes],
// temporal operator search-attribute create, or the dev server's
// --search-attribute).
// Visibility lags: a change shows within about a second on SQL
// visibility, a few on Elasticsearch.
//
// # Operating
//
// Keep a worker running for as long as timeouts are pending on the
// engine: without one, timeouts fire late (when one runs again) and
// Cancel waits. Changing a Router's routes leaves the timeouts already
// scheduled where they are: refs carry their engine, so Cancel follows
// the ref; keep the engine in the Router (a route with Beyond
// math.MaxInt64 takes nothing new) and its workers running until its
// listing is empty. The workflow's code is part of the contract with the
// timeouts already pending: its type, update and activity names are
// fixed, and a change to its logic must keep replaying old histories
// (workflow.GetVersion).
package temporal
