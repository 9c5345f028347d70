// Package timeout is the scheduling API sagas use for their timeouts, with
// engines beneath it.
//
// A [Timeout] is a message to deliver to a transport queue at or after a
// due time. A [Scheduler] schedules it and returns a [Ref]; Cancel with
// that ref has a definite outcome: nil (never delivered),
// [ErrAlreadyFired] (has been or will be delivered) or [ErrNotFound].
//
// Engines:
//   - [Transport], the default: a scheduled message on the transport queue
//     (JetStream's message schedules, or the in-memory broker on a virtual
//     clock in tests). On JetStream a timeout arrives up to ~250 ms late
//     (nats-server's scheduler ticks every 250 ms); [WithEarlyActivation]
//     has it arrive a little early instead, for a receiver that holds it
//     until its due time, as the saga dispatcher does, so that handlers
//     see it within milliseconds of its due time;
//   - Temporal, in the nested module github.com/jetsaga/jetsaga/timeout/temporal
//     (one small workflow per timeout), for timeouts days or months away,
//     so that a service that never uses it does not depend on the Temporal
//     SDK;
//   - [Router], which sends each timeout to an engine by its delay or its
//     saga type, and Cancel to the engine that holds it.
//
// Engines that implement [Lister] list the timeouts they hold; [List]
// and Router.Pending reach every engine.
//
// Every engine passes the conformance suite in timeout/timeouttest.
package timeout
