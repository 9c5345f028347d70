// Package timeout is the scheduling API sagas use for their timeouts, with
// engines beneath it.
//
// A [Timeout] is a message to deliver to a transport queue at or after a
// due time. A [Scheduler] schedules it and returns a [Ref]; Cancel with
// that ref has a definite outcome: nil (never delivered),
// [ErrAlreadyFired] (has been or will be delivered) or [ErrNotFound].
//
// Engines:
//   - [Queue], the default: a scheduled message on the transport queue
//     (JetStream's message schedules, or the in-memory broker on a virtual
//     clock in tests). nats-server's scheduler ticks every 250 ms, so on
//     JetStream the engine activates a timeout [DefaultEarlyActivation]
//     before its due time, for a receiver that holds it until then, as the
//     saga dispatcher does: handlers see it within milliseconds of its due
//     time, never before. [WithEarlyActivation] sets the lead;
//     WithEarlyActivation(0) has timeouts activate at their due time or
//     after (on JetStream up to ~250 ms after). The memory broker
//     activates on time and gets no lead;
//   - Temporal, in the nested module github.com/jetsaga/jetsaga/timeout/temporal
//     (one small workflow per timeout), for timeouts days or months away,
//     so that a service that never uses it does not depend on the Temporal
//     SDK;
//   - [Router], which sends each timeout to an engine by its delay or its
//     saga type, and Cancel to the engine that holds it.
//
// Engines that implement [Lister] list the timeouts they hold; [List]
// and Router.Pending reach every engine. A Queue lists a timeout
// activated early and not yet due as [Pending].Activating ([Activating]
// finds them on a queue by reading only its last seconds).
//
// Every engine passes the conformance suite in timeout/timeouttest.
package timeout
