// Package usersignup is a service that keeps its users in PostgreSQL and
// confirms their e-mail addresses with a saga, with no window in which
// the two disagree:
//
//   - Sign-up inserts the user and starts the confirmation saga in one
//     transaction: the saga's first message is written to a transactional
//     outbox (saga/pgstore/outbox) in the transaction that inserts the
//     row, and relayed to the queue once it commits. A sign-up that fails
//     (the address is taken, the database is gone) starts no saga; one
//     that commits always does.
//   - The saga's state is in PostgreSQL too (saga/pgstore). Its
//     confirmation step marks the user confirmed in the step's own
//     transaction (pgstore.Tx), so the user row and the saga's state
//     commit together; its expiry step deletes the unconfirmed user the
//     same way, freeing the address.
//
// The relay runs inside the dispatcher's Run (saga.WithService). The
// e-mail itself is a message on the queue MailQueue, for a mailer to send.
package usersignup
