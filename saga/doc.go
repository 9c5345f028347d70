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
// As it starts, Run publishes each saga's [CatalogEntry] (its diagram,
// data version, states and transitions) in its queue's state, for the
// jetsaga command and console, which have no definitions.
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
//     instance's inbox for as long as the queue could deliver it again,
//     however many other messages reach the instance meanwhile (see
//     "The inbox" below).
//
// If the record changed since it was loaded (another dispatcher handled a
// message for the same instance), the write fails with [ErrConflict], and
// the handler runs again on the fresh state, up to [WithConflictRetries]
// times. Limits: effects carried out again more than the queue's
// DuplicateWindow (default 10 minutes) after the first try reach their
// queues twice (timeouts are still handled once, by the token check).
//
// # Handlers run more than once
//
// Exactly once holds for what a step commits: c.Data and the effects the
// handler asks for. The handler itself runs more than once for many
// messages: again after a conflict (on a busy instance with several
// dispatchers, most messages: three dispatcher processes on five
// instances taking hundreds of messages a second measured 2.7 to 3.4 runs
// a message), again after a transient error (RetryPolicy), and again when a
// worker dies before its commit. Anything a handler does outside c.Data
// and its effects — a call to another service, a write to a database, a
// log line, a metric — happens at least once, maybe several times, also
// for runs whose change is never committed: make it idempotent, or make
// it an effect (send a message whose handler does it), or make it a
// [Call].
//
// # Calls to the outside world
//
// [Call] runs a call to another system (a payment, an e-mail, an HTTP
// API) from a handler with a key that is the same on every run of the
// step — pass it to the provider as its idempotency key — after recording
// its intent in the store (one write). A re-run of the step gets the
// call's outcome without calling again; a run that finds only the intent
// of an earlier one (a crash mid-call, an error that leaves the outcome
// unknown) follows the call's policy: [RetryWithin] (the default: the same
// key again while the provider remembers it), [ReconcileWith] (ask the
// provider), or [AtMostOnce]; what the policy cannot settle is
// [ErrCallInDoubt], dead-lettered with [ReasonCallInDoubt] if the handler
// returns it. docs/effects.md has the promises and their limits.
//
// # The inbox
//
// An instance's record keeps the identities (a 72-bit digest each, about
// 12 bytes) of the messages its steps committed, with their commit times,
// for the inbox retention: by default [InboxRetention] of the queue
// config, the longest the queue may take to deliver a committed message
// again — MaxDeliveryCount times the server's lock (LockDuration and the
// grace JetStream adds), plus [InboxMargin]: 6 min 30 s with the
// defaults, 1 min 50 s with a 5 s lock — and at least the newest 128, whatever their
// age. Any delivery of the message within it, however busy the instance,
// is a duplicate. A delayed retry of a message several sagas handle,
// which comes back as a new message after its backoff, names the
// instances it was already committed on and is not run on them again,
// whatever the retention. Limits:
//
//   - a shorter retention ([WithInboxRetention]), dispatcher clocks more
//     than InboxMargin apart, or a redelivery that waits longer than that
//     margin behind other steps, can let a message be applied again;
//   - a dead letter sent again by hand after the retention is a new
//     message to every instance it goes to;
//   - a busy instance's record grows by about 12 bytes for each message
//     within the retention (300 messages a second, a 5 s lock: about
//     33,000 entries, 400 KB), and so does each step's cost of
//     encoding it (about 0.1 ms per 1,000 entries). At most [InboxLimit]
//     (50,000) entries: a step beyond it fails with [ErrInboxFull], and
//     is retried (RetryPolicy) as older entries age out, rather than
//     forget a message the queue could still deliver. A shorter
//     LockDuration, or fewer MaxDeliveryCount, shortens the retention.
//
// Records written by releases before the retention (the last 128, no
// times) load with their inbox, counted as committed at the first step
// that loads them. A release before it reads the newest 128 of a record
// written with the retention, as it always kept, and writes it back
// without the rest: during a rolling deploy back and forth, an instance
// a worker of the earlier release steps on keeps the earlier guarantee.
//
// How many calls to the broker and the store a step makes, and why, is
// described in docs/design/commit-path.md of the repository: none of it
// changes the promises above. One rule concerns a custom [Store]: the
// dispatcher's record cache ([WithRecordCache]) needs revisions that never
// come back for a key, also after a delete (see [Store]). With a
// [SchedulingStore] (saga/queuestore, state in the dispatcher's own
// queue), the timeouts a step requests are not carried out after the
// commit but written in it, in the same atomic write as the record. With
// a [UnitStore] (saga/pgstore), each step runs in a unit of work of the
// store — a database transaction the handler can write its own rows in —
// which commits with the record or rolls back, those rows included.
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
// A recurring timeout ([Context.RequestRecurringTimeout] every interval,
// [Context.RequestRecurringTimeoutBy] on a calendar rule) wakes the
// instance at each occurrence, under one handle, until the handle is
// cancelled or the instance completes. The step that handles an
// occurrence schedules the next one, computed from the occurrence's
// nominal time ([Context.TimeoutDue]; [Context.Occurrence] numbers it),
// and the two commit together: one occurrence is pending at a time, none
// is scheduled twice, and the type's catch-up policy decides what an
// overdue one does, each skipped one reported (Hooks.TimeoutLate). An
// occurrence's engine ID and MessageID are derived from the handle and
// the occurrence, not the handle itself.
//
// A timeout has several names, each for one API:
//
//   - its handle ([TimeoutHandle]), returned by [Context.RequestTimeout]:
//     what a saga keeps in its data and gives to [Context.CancelTimeout],
//     [Context.RescheduleTimeout] and [Context.IsPending]. It is also the
//     timeout's ID for its engine (the ID of its [timeout.Timeout]) and the MessageID
//     of the message that brings it back, so that scheduling it twice
//     schedules it once;
//   - its ref ([timeout.Ref], "queue:…" or "temporal:…"), which the engine
//     returned when it scheduled the timeout: what [timeout.Scheduler]'s
//     Cancel takes, and what the Ref of a [ScheduledTimeout] and the
//     jetsaga command show;
//   - on the transport engine, its scheduled sequence number on the
//     dispatcher's queue (the Seq of a [ScheduledTimeout]): what
//     [transport.Queue.Cancel] and `jetsaga scheduled cancel` take. Cancelling
//     it there cancels the message only; the saga still waits for the
//     timeout (cancel through the saga, or [Dispatcher.CancelTimeouts]).
//
// On JetStream the default engine activates a timeout a lead early
// ([timeout.DefaultEarlyActivation]; nats-server activates due schedules
// on a 250 ms tick) and the dispatcher holds it until its due time by its
// own clock, so that handlers see it within milliseconds and never before;
// a timeout that arrives more than the lead plus a second early is
// dead-lettered with [ReasonTimeoutNotDue] ([ErrTimeoutNotDue]). In a
// handler, [Context.TimeoutDue] is the due time; the message's EnqueuedAt
// ([Context.Incoming]) is its activation time, before the due time.
// [Dispatcher.ScheduledTimeouts] lists a timeout so activated as
// Activating until it is due. timeout.WithEarlyActivation(0) gives the
// engine that activates at the due time or after (up to ~260 ms after on
// JetStream). The trade-offs and figures are in the guide
// docs/early-activation.md of the repository.
//
// # Business time
//
// [Context.RequestTimeoutBy] requests a timeout by a calendar rule
// (package calendar) instead of a duration: "three business days after,
// at 09:00 Europe/Warsaw", "seven business days before the renewal"
// ([RuleFrom]). The dispatcher computes the instant once, at the request,
// from the handler's Now and a calendar of the registry given with
// [WithCalendars] (by name, [OnCalendar], at the version WithCalendars
// makes current), and keeps the rule, the calendar's name and version and
// the instant it counted from with the timeout: [PendingTimeout] and
// [ScheduledTimeout] show them, and so does the jetsaga command. A
// calendar that changes (a holiday announced) leaves pending timeouts at
// their instants until [Dispatcher.ReplanTimeouts] (or `jetsaga timeouts
// replan`) computes them again under the new version, each instance as a
// step, with a definite outcome per timeout ([Replanned]).
//
// # Catching up
//
// A timeout handled long after its due time — the server or every
// dispatcher was down, the queue backed up — is handled by its type's
// catch-up policy, given to [OnTimeout]: fired as usual (the default),
// skipped ([CatchUp] with [CatchUpSkip]: dropped, logged, the step's
// outcome [Skipped]), coalesced ([CatchUpCoalesce]: only the latest
// overdue timeout of the type per instance is handled), or handed to a
// late handler that is told how late it is ([HandleLate]), when it is
// later than the type's tolerance. The dispatcher decides as it handles
// the timeout's message, by its own clock, so the policy is the same on
// every engine. [Hooks].TimeoutLate reports each timeout beyond its
// tolerance, for a lateness metric.
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
// # Changing a saga
//
// A saga whose timeouts are weeks out outlives many deployments; its data
// type, message names and timeout payloads change while instances are
// pending.
//
// Data: [DataVersion] declares the version of the saga's data type and
// the [Upcaster] of each older version to the next ([Upcast] typed,
// [UpcastBytes] on the encoded data). Every record carries the version
// it was written with (a record without one is version 1, as every
// record written before versions existed); on load, older data is upcast
// version by version, so a handler sees only the current type, and the
// next commit writes it at the current version. [InstanceOf] reads an
// instance's data the same way. A dispatcher whose definition is older
// than a record never writes it: the step ends with the outcome
// [VersionWait] (StepResult.Err matches [ErrDataVersionAhead]), logged at
// Info level, and the message is scheduled again on the queue for a
// newer worker after [WithVersionWait].
//
// So a rolling deploy from version n to a later one needs no order
// among the workers and loses nothing: while old and new workers share
// the queue, an instance a new worker has written is handled only by new
// workers, and the old ones leave its messages to them, delayed by the
// wait each time, until the last old worker is gone. Three rules remain:
//
//   - the first release: workers built with a jetsaga release before data
//     versions do not check them. Deploy this release of jetsaga with the
//     saga at version 1 (no DataVersion) to every worker first, and only
//     then a version that declares DataVersion(2);
//   - roll back only to a release that knows the newest version written,
//     or the instances written since wait until a newer worker returns;
//   - keep the upcasters of every version that may still be stored: an
//     instance untouched since version 1 needs all of them.
//
// Messages and timeouts: a message type keeps its name across renames
// with [Named]; a type that replaced others lists their names with
// [Aliased], each with an Upcaster of the old body's shape. Sagas,
// [Decode] and [Decoder] receive a message, or a timeout, sent under an
// alias as the new type; what the type sends travels under its current
// name. Give a type a new name when its shape changes in a way the old
// bodies do not decode into, and keep the old one as an alias with an
// upcaster. The guide docs/evolving.md of the repository has a worked
// example, and how sagatest checks golden records and payloads of an
// older version.
//
// # Liveness
//
// A saga defined with [CheckLiveness] promises that a running instance
// always waits for something: a pending timeout, or a message that its
// last step declared with [Context.Expect] (an expectation lasts one
// step). An instance that waits for nothing is stuck: sagatest fails a
// test that leaves one, and [Dispatcher.StuckInstances] lists them, over
// a store that can list its keys ([ListingStore]).
//
// # Indexes
//
// [Index] and [IndexValues] declare values of a saga's data that find
// its instances: [Find] (and [Dispatcher.Find]) lists the live instances
// that hold a value, in ID order, and [ByIndex] correlates a message to
// the instance that holds the message's value, instead of an instance ID.
// A [Unique] index holds each value for one live instance: a start
// correlated by it reaches the instance that holds its value, from any
// process, and a step that gives a value another live instance holds
// fails with [ErrIndexValueTaken]. Several live instances holding a
// value a handled message is correlated by fail it with
// [ErrAmbiguousIndex]; none sends it to the [NotFoundPolicy].
//
// Index values change with the record, on any Store: the instance's
// values are kept in its record, and each new value's entry, a key of the
// store beside it ([IndexKeyPrefix]), is written before the record; the
// record is the truth, so an entry whose record does not hold its value
// (a step that died between the two writes) is never taken, and is
// deleted when read. On a [UnitStore] (saga/pgstore) the entries commit
// with the record in the step's transaction. A completed instance leaves
// its indexes at its completing step; its tombstone is never found.
// [Dispatcher.Reindex] indexes the instances written before an index
// existed. Values are 1–[MaxIndexValueLen] bytes of UTF-8 without control
// characters ([ErrInvalidIndexValue]); they reach store keys only
// base64url-encoded. See docs/indexes.md.
//
// # Diagrams
//
// [Definition.Mermaid] draws a saga from what its definition declares,
// as Mermaid flowchart text: the messages that start it, those it
// handles, its timeouts (with their catch-up policy) and completion, and
// in the instance's box its data version, the liveness check and its
// NotFoundPolicy. What a handler decides at run time — whether it
// completes the instance, which timeouts it requests, what it expects —
// is not in the definition, and not in the diagram. Package saga/machine
// draws a state machine's states and transitions (Machine.Mermaid).
//
// # Operating
//
// [Dispatcher.Instance] shows one instance's state and pending timeouts
// ([InstanceOf] decodes its data);
// [Dispatcher.ScheduledTimeouts] lists the timeouts waiting in the queue;
// [Dispatcher.CancelTimeouts] and [Dispatcher.CancelAllTimeouts] cancel
// them, as steps on the instances (they never race a handler's step) that
// report exactly what they cancelled. After a change of the timeout
// Router's routes, [Dispatcher.MigrateTimeouts] moves a saga type's
// pending timeouts to another engine, one by one, the same way
// ([Migrated]), and [Dispatcher.DrainReport] says what is left on an
// engine. Logging is log/slog ([WithLogger]);
// [Hooks] report each step for metrics and tracing at no cost when unset.
package saga
