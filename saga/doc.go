// Package saga runs long-lived business workflows — sagas — in the style
// of NServiceBus and MassTransit: state stored per instance, started and
// correlated by messages, continued later by timeouts.
//
// # Defining a saga
//
// A saga has typed data S and a name. Messages start it, messages for an
// existing instance are handled by it, and timeouts it requested come
// back to it:
//
//	type OTP struct{ Code string; Attempts int }
//
//	var TwoFactor = saga.Define[OTP]("twofactor")
//
//	func init() {
//		saga.StartedBy(TwoFactor, saga.By(func(m CodeRequested) string { return m.User }),
//			func(ctx context.Context, c *saga.Context[OTP], m CodeRequested) error {
//				c.Data.Code = m.Code
//				_, err := c.RequestTimeout(5*time.Minute, Expired{})
//				return err
//			})
//		saga.OnTimeout(TwoFactor, func(ctx context.Context, c *saga.Context[OTP], _ Expired) error {
//			c.MarkComplete()
//			return c.Send("notifications", CodeExpired{User: c.ID()})
//		})
//	}
//
// Correlation maps a message to an instance ID: [By] takes it from a
// property; a [Finder] may look it up elsewhere. Two starting messages with
// the same ID that race create one instance: the loser finds it and is
// handled by it.
//
// Message types travel under a name: the Go type's package-qualified name,
// or the name its MessageName method returns ([Named]) — implement it to
// keep the name stable across renames. Bodies and data are JSON unless
// [WithCodec] says otherwise.
//
// # Running sagas
//
// A [Dispatcher] is an endpoint: it receives one transport queue's
// messages, runs the sagas registered with it, and settles each message.
// Run it next to an existing service's HTTP or gRPC handlers, which start
// and feed sagas with [Dispatcher.Send]:
//
//	d, err := saga.NewDispatcher(broker, store, "auth", saga.WithSagas(TwoFactor))
//	go d.Run(ctx) // returns after ctx ends and the messages in flight finish
//
// # Publish and subscribe
//
// With [WithTopic] a dispatcher is an endpoint of a transport topic:
// [Context.Publish] (and [Dispatcher.Publish]) sends events to the topic,
// the event's type as the message's Subject, and Run subscribes the
// endpoint to the types its sagas start or handle. Every endpoint with
// such a saga gets each event published after its subscription was
// created, once per endpoint however many processes run it; an endpoint
// added later needs no change to the publisher:
//
//	orders, _ := saga.NewDispatcher(b, store, "orders", saga.WithSagas(Ordering),
//		saga.WithTopic(transport.TopicConfig{Name: "shop"}))
//	billing, _ := saga.NewDispatcher(b, store, "billing", saga.WithSagas(Billing),
//		saga.WithTopic(transport.TopicConfig{Name: "shop"}))
//
// The subscription is named after the queue and a hash of the set of
// types (at most 16). A new version of an endpoint that handles other
// types opens its own subscription first, then drains the old one and
// deletes it, so no event of a type both versions handle is lost. Events
// are deduplicated per endpoint by the sagas' inboxes, like any message.
// [WithSubscribers], the static list of queues per event type, keeps
// working beside a topic (Publish sends to both).
//
// # All or nothing
//
// A handler changes c.Data and asks for effects: [Context.Send],
// [Context.Publish], [Context.Reply], [Context.ReplyToOriginator],
// [Context.RequestTimeout], [Context.CancelTimeout], [Context.MarkComplete].
// None of them happens while the handler runs. When it returns nil, the
// dispatcher stores, in one conditional write (optimistic concurrency on
// the store's revision), the new data together with the effects (an
// outbox) and the incoming message's identity (an inbox). Only then does it
// carry the effects out — each with an ID fixed in the stored record, so
// that doing it again is deduplicated by the transport's duplicate
// detection — and acknowledge the message. So:
//
//   - no ghost messages: nothing is sent unless the state change is stored;
//   - no zombie state: a stored change whose effects were not all carried
//     out (a crash) is finished by whoever next touches the instance, or by
//     the redelivery of the message;
//   - a redelivered message has no second effect: its identity is in the
//     inbox (the last 128 per instance).
//
// If the record changed since it was loaded (another dispatcher handled a
// message for the same instance), the write fails with [ErrConflict], and
// the handler runs again on the fresh state, up to [WithConflictRetries]
// times. Limits: effects carried out again more than the queue's
// DuplicateWindow (default 10 minutes) after the first try reach their
// queues twice (timeouts are still handled once, by the token check).
//
// # The commit path
//
// A step costs, besides the handler, these calls to the broker and the
// store:
//
//   - receive: each worker receives up to [WithReceiveBatch] messages
//     (default 8) in one request and handles them in turn;
//   - load: none if the dispatcher's record cache ([WithRecordCache])
//     holds the record as this dispatcher last wrote it; else one;
//   - commit: one conditional write of data, outbox and inbox;
//   - effects: one call per message sent and per timeout scheduled or
//     cancelled;
//   - clear: a second write that empties the outbox — only if the step
//     sent messages, or the cache is not paying off (below). An outbox of
//     timeouts only (schedules and cancels) stays in the stored record
//     until the next commit on the instance drops it; the dispatcher's
//     cache remembers that it was carried out. Not with a
//     [timeout.Router] of several engines: a process that loads the
//     record (the jetsaga command, say) carries such an outbox out again
//     with its own scheduler, which could route a timeout elsewhere, so
//     there the refs are recorded by the clear;
//   - acknowledge: the message is completed without waiting for the
//     broker's reply ([transport.Delivery.CompleteNoWait]) when every
//     saga it went to committed it or found it a duplicate (its identity
//     is in their inboxes, so a lost acknowledgement only brings a
//     redelivery that is a duplicate); other outcomes wait for it.
//
// A step that requests one timeout therefore makes a commit, a schedule
// and an acknowledgement, plus a share of a receive; the first design
// made a receive, a load, a commit, a schedule, a second write and a
// waited-for acknowledgement.
//
// The cache is a hint, never a source of truth. A step started from a
// cached record commits against the cached revision, which the store
// refuses if anyone (another dispatcher, an operator's CancelTimeouts)
// wrote the record since; the step then runs again on a fresh load, as on
// any conflict. Every decision that does not end in such a commit — a
// duplicate, a timeout no longer pending, a missing or completed
// instance, a handler error — is made again on a fresh load before it is
// acted on. The cache needs a store whose revisions never come back for a
// key (kvstore and memstore qualify); turn it off with WithRecordCache(0)
// for one that reuses them. Each dispatcher has its own, and measures it:
// while, of its recent steps that found a record, at least half found it
// in the cache as stored, steps start from the cache and leave outboxes
// of timeouts in the record; otherwise — other dispatchers take most of
// the turns on the instances — steps load the record and clear the
// outbox, as the first design did, and keep checking whether the cache
// would have held the record, to return to it when the turns come back.
// (Measured with three dispatchers taking turns on the same instances:
// CPU per step as in the first design; with one, about 0.6 of it.)
//
// Leaving an outbox of timeouts in the record is safe because carrying
// it out again is harmless at any time: scheduling is idempotent on the
// timeout's ID and returns its ref while it is pending
// ([timeout.Scheduler]); a timeout that already fired and was handled has
// left the record's pending timeouts together with the outbox (the step
// that handled it committed), and one scheduled again after the engine
// forgot its ID could only be delivered to be dropped by the token check;
// cancelling what is no longer pending is ignored. A step that loads such
// a record from the store — on another dispatcher, after a restart, or
// after a crash between commit and carrying out — carries the outbox out
// before it runs, which is also what finishes the work of a dispatcher
// that crashed. It costs that step one schedule call per kept timeout
// (on the transport engine, a duplicate schedule is two server
// operations), where the first design paid the second write on every
// step. Messages to send are never left behind: sending one again after
// the DuplicateWindow would deliver it twice.
//
// # Committed, effects pending
//
// A step whose change is committed but whose effects cannot all be
// carried out yet — a destination queue at its MaxBytes
// (transport.ErrQueueFull), a broker briefly unreachable — has not
// failed: its change stands and will not be undone. Its message is
// completed with the outcome [EffectsPending] (StepResult.Err matches
// [ErrEffectsPending] and the cause), never retried or dead-lettered. The
// effects stay in the instance's record and are carried out, exactly
// once, by whichever comes first: the next step on the instance (which
// carries out a pending outbox before anything else, and fails, to be
// retried, while it cannot) or a retry the dispatcher schedules on its own
// queue (scheduled messages are not held back by a full queue), repeated
// with [RetryPolicy].Backoff until they are out.
//
// # Completed instances
//
// A completed instance leaves a tombstone: its inbox, so that a
// redelivered or late message cannot start it again, and the fact that it
// completed, which a [NotFoundPolicy] Handler sees. The tombstone is kept
// for [WithCompletedRetention] (default 7 days, [DefaultRetention]): that
// is the window in which a redelivered starting message cannot restart a
// finished instance. After it, with a store that lets records expire
// ([ExpiringStore]: kvstore, memstore), the tombstone is gone and leaves no
// trace, and such a message starts a new instance with the same ID.
// # Timeouts
//
// [Context.RequestTimeout] returns a [TimeoutHandle]; keep it in the data
// to cancel or reschedule the timeout. A timeout that arrives after it was
// cancelled or rescheduled, or after the instance completed, is dropped
// (its token is no longer in the instance's state) — never handled.
// Completing an instance cancels its pending timeouts. In an OnTimeout
// handler [Context.Timeout] returns the handle of the timeout being
// handled, to tell several timeouts of one type apart;
// [Context.IsPending] tells whether a handle is still pending. A payload
// type the saga has no OnTimeout for is refused at the request
// ([ErrNoTimeoutHandler]). Timeouts are scheduled through a
// [timeout.Scheduler]: by default scheduled messages on the dispatcher's
// own queue; the Temporal engine for long ones.
//
// On JetStream a timeout of the default engine reaches its handler up to
// ~260 ms after its due time: nats-server activates due schedules on a
// 250 ms tick. For handlers that should see it on time, have the engine
// activate timeouts a little early, and the dispatcher holds them:
//
//	engine := timeout.NewTransport(b, timeout.WithEarlyActivation(timeout.DefaultEarlyActivation))
//	d, err := saga.NewDispatcher(b, store, "auth", saga.WithSagas(TwoFactor), saga.WithTimeouts(engine))
//
// A timeout activated early — its due time ([timeout.PropertyDue]) after
// its ScheduledAt — is held, locked, until its due time by the
// dispatcher's clock, then handled as any other: handlers see it within
// milliseconds of its due time (10,000 timeouts over 10 s on a 2-core
// machine: p99 ~10 ms, max ~22 ms; `go run ./cmd/jetsaga-bench -only
// lateness`) and never before it. Run
// holds it in a goroutine of its own (up to 4096 at once per Run; a
// worker holds any beyond that itself), so the worker goes on with other
// messages, and handles it in a concurrency slot once due. A crash while
// holding only delays the timeout: it is redelivered when its lock
// expires (the lock is renewed during a hold that could outlast it).
// Stopping Run lets held timeouts come due and handles them, as it lets
// steps in flight finish; [Dispatcher.Handle], in a receive loop of your
// own, holds in place and abandons the timeout for redelivery if its
// context ends first. The hold is bounded: a timeout that arrives more than its lead
// plus one second ahead of its due time — the clocks of dispatcher and
// server disagree by more than that, or its due property is not the one
// its engine wrote — is neither held nor handled but dead-lettered with
// [ReasonTimeoutNotDue] ([ErrTimeoutNotDue]). A timeout whose due
// property is missing or unreadable (engines always write it) is handled
// on arrival, as before, with a warning logged. Timeouts not activated
// early are never held.
//
// It is off by default because it changes what can be observed: the
// message's EnqueuedAt ([Context.Incoming]) is before the due time;
// [Dispatcher.ScheduledTimeouts] no longer lists a timeout within its
// lead; the engine's Cancel reports it fired (cancelling it still works
// for the saga, as for any timeout cancelled after it fired: its message
// is dropped by the token check). And every dispatcher that receives from
// the queue must hold such timeouts (this version of jetsaga or later).
//
// # Failures
//
// A handler error is retried at once ([RetryPolicy].Immediate times), then
// after delays as scheduled copies of the message ([RetryPolicy].Delayed),
// then the message goes to the queue's dead-letter queue with the error as
// its description. Errors wrapped with [Permanent] skip the retries. A
// panic is an error. A message that cannot be decoded, or whose type no
// saga handles, is dead-lettered at once. A message for a missing instance
// follows the saga's [NotFoundPolicy]: ignored, dead-lettered, or given to
// its Handler, which can tell a completed instance from one that never
// existed and reply.
//
// What a handler asks for is checked at the call: an invalid queue name,
// a message the transport would refuse (a bad property, too large), a
// reply without ReplyTo ([ErrNoReplyTo]), a timeout no OnTimeout handles
// ([ErrNoTimeoutHandler]) is an error from [Context.Send], [Context.Reply],
// [Context.Publish] or [Context.RequestTimeout] that matches both
// [ErrPermanent] and its cause (transport.ErrInvalidQueueName, ...):
// returned from the handler, it dead-letters the message at once.
//
// A dead letter is the message as it was first sent — its MessageID, body
// and properties, without the bookkeeping of delayed retries — so that an
// operator can send it again, plus its retry history in
// [PropertyAttempts], [PropertyDelayedRetries], [PropertyFirstFailure] and
// [PropertyLastError]. Nothing of a dead-lettered message's step was
// committed: a step that committed is never dead-lettered (see
// [EffectsPending]).
//
// # Operating
//
// [Dispatcher.Instance] shows one instance's state and pending timeouts;
// [Dispatcher.ScheduledTimeouts] lists the timeouts waiting in the queue;
// [Dispatcher.CancelTimeouts] and [Dispatcher.CancelAllTimeouts] cancel
// them, as steps on the instances (they never race a handler's step) that
// report exactly what they cancelled. Logging is log/slog ([WithLogger]);
// [Hooks] report each step for metrics and tracing at no cost when unset.
package saga
