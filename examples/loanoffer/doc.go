// Package loanoffer is a loan offer that waits two weeks for the
// customer's answer, written as a saga: a long-running saga whose
// timeouts span minutes and weeks. The offer goes out at once; a customer
// who has not opened it after 10 minutes gets a nudge, everyone who has
// not accepted gets a reminder after 7 days, and after 14 days the offer
// expires. Accepting books the loan and cancels whatever is still
// pending.
//
// The package is a library: [New] returns the saga definition, which a
// service registers with a [saga.Dispatcher]. It talks to the rest of the
// service through messages only:
//
//	service → dispatcher queue: OfferMade, OfferViewed, OfferAccepted
//	saga → events queue:        OfferSent, NudgeDue, ReminderDue, LoanBooked, OfferExpired
//
// # One definition, two engines
//
// The definition says nothing about where its timeouts live. A
// dispatcher whose timeout scheduler is a timeout.Router sends each one
// to an engine by its delay: the 10-minute nudge to JetStream (a
// scheduled message on the dispatcher's queue), the 7- and 14-day ones to
// Temporal (one small workflow each, from the nested module
// github.com/jetsaga/jetsaga/timeout/temporal), which teams that already
// run Temporal trust with timeouts that outlive deployments, stream
// migrations and the like:
//
//	router := &timeout.Router{
//		Default: timeout.NewQueue(broker),                  // JetStream
//		Routes:  []timeout.Route{engine.Route(24 * time.Hour)}, // Temporal beyond a day
//	}
//	d, err := saga.NewDispatcher(broker, store, "loans", saga.WithSagas(loanoffer.New(loanoffer.Config{})),
//		saga.WithTimeouts(router))
//
// Completing the saga cancels its pending timeouts on whichever engine
// holds each (a timeout's ref names its engine), and
// Dispatcher.ScheduledTimeouts lists them from both.
//
// # Tests
//
// loanoffer_test.go runs the definition on package sagatest's virtual
// clock with the real durations — the nudge at exactly 10 minutes, the
// reminder at 7 days, the expiry at 14 — in milliseconds, and explores an
// acceptance racing the expiry at its instant.
//
// # Demo
//
// The demo, a module of its own because it depends on the Temporal SDK,
// runs three offers on an embedded nats-server and a local Temporal dev
// server, with the durations scaled down to seconds, and prints which
// engine holds each timeout:
//
//	cd examples/loanoffer/demo && go run .
//
// The first run builds the temporal CLI (which embeds the dev server)
// from the Go module proxy into the user's cache directory: a few
// minutes, once.
package loanoffer
