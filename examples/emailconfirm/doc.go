// Package emailconfirm is a sign-up that waits for the new account's
// e-mail address to be confirmed, written as a saga. The user gets a
// confirmation link at once, a reminder after 30 minutes, and if the link
// has not been used after an hour the account is released (deleted, its
// name and address free again). Following the link after that is refused
// politely: the user's service is told the link expired and when, so that
// it can say so and offer to sign up again.
//
// The package is a library: [New] returns the saga definition, which a
// service registers with a [saga.Dispatcher]. It talks to the rest of the
// service through messages only:
//
//	service → dispatcher queue: SignedUp, ConfirmEmail
//	saga → events queue:        ConfirmationRequested, ReminderDue, Confirmed,
//	                            AccountReleased, ConfirmationRefused
//
// The service sends the commands with [saga.Dispatcher.Send] and consumes
// the events queue ("signup-events" by default): it e-mails the link on
// ConfirmationRequested and the reminder on ReminderDue, activates the
// account on Confirmed, deletes it on AccountReleased, and shows an
// "expired link" page on ConfirmationRefused.
//
// # Timeouts
//
// Sign-up requests two timeouts, the reminder at 30 minutes and the
// release at an hour: scheduled messages on the dispatcher's queue (NATS
// JetStream message schedules in production), which survive restarts.
// Confirming completes the saga, which cancels whichever of them is still
// pending: confirmed before the reminder, the user gets neither.
//
// # Refusing late confirmations
//
// A confirmation that comes after the release must be refused politely,
// which needs to know that the link existed, for which address, and when
// it expired. Two ways were open:
//
//   - Complete the saga at the release and refuse from the saga-not-found
//     policy ([saga.NotFoundPolicy].Hook). But the hook runs outside any
//     saga step: it has no state (it cannot tell an expired link from a
//     made-up one, nor name the address or the expiry time) and no
//     [saga.Context] to send with, so it would have to send through the
//     dispatcher it is registered with (a circular set-up) and outside
//     the step's all-or-nothing commit.
//   - Keep the saga for a while after the release, in a Released state,
//     and refuse in an ordinary step: ConfirmationRefused is sent through
//     the step's outbox, all or nothing, with the address and expiry time
//     from the state, and it is tested like every other step.
//
// This package does the second. After the release the saga requests one
// more timeout, [Config].RefuseFor later (default 7 days), and completes
// when it fires. Until then a confirmation is refused with
// [ReasonExpired]; after it, the saga is gone and a confirmation for it
// follows the dispatcher's default policy for a missing instance: it is
// dropped and logged at Debug level. A sign-up for the same account during
// that time starts over with a new link. A confirmation with a token that
// is not the current one (an old link after a new sign-up, a mistyped
// link) is refused with [ReasonInvalidToken] and changes nothing.
//
// # Tests
//
// emailconfirm_test.go runs the saga on package sagatest's virtual clock
// with the real durations: the reminder at exactly 30 minutes, the release
// at exactly one hour, the saga's end 7 days later.
//
// # Demo
//
// The demo runs three sign-ups against an embedded nats-server (or the one
// -nats or $NATS_URL names), with durations shortened to seconds, and shows
// the sequence numbers, enqueue times and due times of the messages
// involved: the timeouts waiting in the dispatcher's queue, the timeouts as
// they activate (with their lateness), and the events the service
// receives.
//
//	go run ./examples/emailconfirm/demo                            # reminder 3s, release 6s
//	go run ./examples/emailconfirm/demo -reminder 30m -expiry 1h   # as in production
package emailconfirm
