// Package twofactor is a two-factor authentication (2FA) flow written as a
// saga: a code is issued, the user has 5 minutes and 3 attempts to enter
// it. A correct code completes the flow, a wrong one costs an attempt, the
// third wrong one ends it, and when the 5 minutes are up the code expires
// and the user's service is told. Asking for a new code replaces the
// pending timeout: the old one is cancelled and a new one requested, so the
// first code's expiry never fires.
//
// The package is a library: [New] returns the saga definition, which a
// service registers with a [saga.Dispatcher] next to its own handlers (see
// examples/httpservice). The flow talks to the rest of the service through
// messages only:
//
//	service → dispatcher queue: CodeRequested, CodeResendRequested, CodeEntered
//	saga → events queue:        CodeIssued, CodeRejected, Verified, Failed
//
// The service sends the commands with [saga.Dispatcher.Send] and consumes
// the events queue ("auth-events" by default): it delivers CodeIssued's
// code by SMS or e-mail and lets the login proceed on Verified.
//
// # Timeouts
//
// The 5-minute expiry is a saga timeout: a scheduled message on the
// dispatcher's queue (a NATS JetStream message schedule in production),
// which survives restarts of the service and of nats-server. Its handle is
// kept in [State].Expiry; a resend cancels it with [saga.Context.CancelTimeout]
// before requesting a new one, and a timeout that was cancelled (or that
// arrives after the flow completed) is dropped by the dispatcher's token
// check, never handled. Completing the flow cancels its pending timeout.
//
// # Tests
//
// twofactor_test.go runs the flow with package sagatest on a virtual
// clock, with the real durations: a code that expires exactly at 5m0s and
// not a nanosecond before, a resend at 2m whose original expiry at 5m does
// nothing while the new one fires at 7m, and so on — each test takes
// milliseconds. explore_test.go explores the races at the instant of the
// expiry with sagatest.Explore — the right code entered then, a resend, a
// redelivered wrong code — in every order the dispatcher could take them.
//
// # Demo
//
// The demo plays three users against an embedded nats-server (or the one
// -nats or $NATS_URL names), with the dispatcher's state in a JetStream
// key-value bucket, and prints what the user's service receives:
//
//	go run ./examples/twofactor/demo            # codes live 10s
//	go run ./examples/twofactor/demo -ttl 5m    # as in production
package twofactor
