// Package transporttest is the conformance suite of package transport: one
// set of tests, run against every backend, that checks the promises the
// transport documents (its package documentation, S1–S10) with concrete values.
//
// A backend's test calls Run with a function that makes a fresh Broker for
// each subtest, and with the Features it has beyond the common contract:
//
//	func TestMemory(t *testing.T) {
//		transporttest.Run(t, func(t *testing.T) *transport.Broker {
//			b, err := transport.NewMemory()
//			if err != nil {
//				t.Fatalf("NewMemory: %v", err)
//			}
//			t.Cleanup(func() { b.Close() })
//			return b
//		}, transporttest.Features{ActivationSlack: 100 * time.Millisecond})
//	}
//
// RunKeyed runs the same tests with fairness keys on: every queue and
// topic a test opens with one partition has four, and every message a
// test sends without a SessionID or a PartitionKey carries a key of that
// queue or topic, in a partition other than the first. Each promise is
// then checked per partition — sequence numbers 1, 2, 3… in the key's
// partition, carrying its id — as it is on a queue of one. Run both.
//
// # What is checked
//
// The subtests of Run are grouped by concern, one file each:
//
//   - Send: sequence numbers 1, 2, 3… per queue, EnqueuedAt in UTC, every
//     property round-trips exactly.
//   - Schedule: never early, activation as a new active message, Schedule
//     and Send with ScheduledAt, past and zero times.
//   - Cancel: definite outcomes, including Cancel racing activation.
//   - GapFree: active sequence numbers stay 1..N when sends, schedules,
//     cancellations and activations interleave.
//   - Browse: Peek and Browse show scheduled and active messages, page by
//     page, in sequence order.
//   - Receive: peek-lock, abandon, lock expiry and renewal, dead-lettering,
//     MaxDeliveryCount, competing consumers, retrieval order.
//   - Session: one message of a session at a time, in order, across
//     competing receivers; a dead consumer's session moves on.
//   - Partition: partition ids in sequence numbers, gap-free per partition.
//   - Duplicate: duplicate detection by MessageID.
//   - Queue: attaching to a queue as configured, MaxBytes, the
//     dead-letter queue's name and shape.
//   - Input: hostile names, IDs and sizes; use after Close; config changes.
//   - Topic: fan-out to subscriptions through filters on the type and on
//     declared properties, hostile filter values, scheduled messages
//     reaching every matching subscription once with the topic's sequence
//     number, per-subscription dead-letter queues, exclusive sessions on
//     a subscription across brokers, the subscription life cycle.
//   - Counts: queue, topic and subscription counts, exact at rest and
//     never negative while sends, receives, cancellations and activations
//     race.
//   - Restart: scheduled and active messages, topics and subscriptions
//     survive a server restart (only when Features.Restart is set).
//   - SlowLink: through a link whose requests reach the server 1.2 s late
//     (DelayProxy), a queue, a subscription and sessions of both get each
//     message first with DeliveryCount 1, soon, and dead-letter nothing
//     (only when Features.SlowLink is set).
//
// # Time
//
// The suite runs in real time. Lower bounds are strict: a scheduled message
// that is received, or carries an EnqueuedAt, before its ScheduledAt fails
// the test, and so does a redelivery before the previous lock's
// LockedUntil. Upper bounds only limit how long a test waits for something
// that must happen, so they are generous and cost time only on failure;
// Features.ActivationSlack sets how late a backend may activate a scheduled
// message. Two upper bounds are tight enough to be part of the contract: a
// message scheduled for a past time activates within ActivationSlack plus
// one second, and a call waiting for a message returns within two seconds
// once its context is cancelled or its broker closed. Broker timestamps are compared with the test's clock within
// one second, except for the never-early checks, so the backend's server
// should run on the same host (an embedded nats-server does).
//
// # Isolation
//
// Each subtest opens its own queue, named after the subtest and deleted
// before and after it, and most subtests run in parallel. The restart
// subtests run alone, before the parallel ones; nothing else should use
// the backend's server while Run runs them.
package transporttest
