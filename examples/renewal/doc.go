// Package renewal is a monthly subscription renewal written as a saga in
// business time: a reminder seven business days before each renewal at
// 09:00 in the customer's time zone, a charge at the renewal, three
// business days of grace with a retry each business day at 09:00, and
// cancellation at any point. A payment that arrives after the
// subscription ended is refunded.
//
//	service → dispatcher queue: Subscribed, PaymentSucceeded, PaymentFailed, CancelRequested
//	saga → events queue:        Reminder, Charge, Renewed, Lapsed, Refund, Ended
//
// # Business time
//
// The reminder and the end of grace are timeouts requested by calendar
// rules (saga.Context.RequestTimeoutBy, [ReminderRule], [GraceRule],
// [RetryRule]) read in the customer's zone, on the business calendar of
// the dispatcher's registry (saga.WithCalendars): the dispatcher computes
// each instant once, when it is requested, and keeps the rule, the
// calendar's version and the renewal it counts from with the timeout, so
// that `jetsaga sagas show` shows them and a new version of the calendar
// (a holiday announced) can be applied to pending reminders with
// saga.Dispatcher.ReplanTimeouts or `jetsaga timeouts replan`. A
// renewal keeps its wall-clock time across daylight saving changes
// ([Renewal](n) is "n months after the first renewal, in the customer's
// zone": a series counts from its first date, so the 31st stays the 31st
// where the month has one).
//
// # Outages
//
// A reminder handled more than [Config].ReminderTolerance after its due
// time (the servers were down) goes to a late handler (saga.HandleLate):
// it is sent, marked LateBy, if the renewal is still to come, and dropped
// otherwise. Charges and the end of grace fire however late.
//
// # Tests
//
// renewal_test.go runs the saga with package sagatest on a virtual clock:
// a year of monthly renewals (tens of milliseconds), a renewal across a
// daylight saving change, a holiday announced mid-year and re-planned,
// outages across a reminder and across a renewal, a cancellation, and,
// in explore_test.go, a payment racing the end of grace with
// sagatest.Explore.
package renewal
