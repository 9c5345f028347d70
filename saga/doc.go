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
// detection — clear the outbox in a second write, and acknowledge the
// message. So:
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
// queues twice (timeouts are still handled once, by the token check); a
// completed instance leaves a tombstone with its inbox, so that a
// redelivered message cannot start it again.
//
// # Timeouts
//
// [Context.RequestTimeout] returns a [TimeoutHandle]; keep it in the data
// to cancel or reschedule the timeout. A timeout that arrives after it was
// cancelled or rescheduled, or after the instance completed, is dropped
// (its token is no longer in the instance's state) — never handled.
// Completing an instance cancels its pending timeouts. Timeouts are
// scheduled through a [timeout.Scheduler]: by default scheduled messages on
// the dispatcher's own queue; the Temporal engine for long ones.
//
// # Failures
//
// A handler error is retried at once ([RetryPolicy].Immediate times), then
// after delays as scheduled copies of the message ([RetryPolicy].Delayed),
// then the message goes to the queue's dead-letter queue with the error as
// its description. Errors wrapped with [Permanent] skip the retries. A
// panic is an error. A message that cannot be decoded, or whose type no
// saga handles, is dead-lettered at once. A message for a missing instance
// follows the saga's [NotFoundPolicy].
//
// # Operating
//
// [Dispatcher.Instance] shows one instance's state and pending timeouts;
// [Dispatcher.ScheduledTimeouts] lists the timeouts waiting in the queue;
// [Dispatcher.CancelTimeouts] and [Dispatcher.CancelAllTimeouts] cancel
// them. Logging is log/slog ([WithLogger]); [Hooks] report each step for
// metrics and tracing at no cost when unset.
package saga
