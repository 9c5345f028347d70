// Package pull pulls messages from a JetStream consumer and keeps what
// arrives until a receive takes it.
//
// A receiver asks a consumer's leader for messages with pull
// requests, each answered on a reply subject of the receiver's. The server
// hands a message to a pull for as long as the pull lives on the server,
// which is from the moment the request reaches it until its expiry: over
// a slow link (requests reaching the server a second late, or a loaded
// server) that is well after the client stopped waiting for it. A client
// that then stops listening loses every message the server hands to the
// pull meanwhile: each stays locked, unseen, until its ack wait runs out,
// and comes back with its delivery count raised; after MaxDeliveryCount
// such losses it is dead-lettered without ever having been seen.
//
// So a puller keeps listening. Each consumer a receiver reads has one
// puller. Each of its pulls has an inbox of its own, which stays
// subscribed until the server ends the pull (a status, or the batch
// delivered), whether or not a receive still waits for it; every message
// that arrives is kept, in arrival order, until a receive takes it: the
// one waiting now, or the next one. Messages kept while no receive takes
// them are kept locked (renewed) for up to heldMax, and then released. A
// receive waits for its pull's end for at most Slack past the pull's
// expiry and then moves on; a pull the server never ends (it restarted,
// say) is forgotten forgetAfter past its expiry.
//
// Order. The inboxes of a puller's pulls share one channel, which one
// goroutine drains: nats.go fills it in the order the server sent
// (handlers of their own would run in any order), and a consumer sends
// first deliveries in sequence order. So what is kept is in sequence
// order, redeliveries aside. Receives take it oldest first, and stop at
// the first message of a pull that has not ended: a receive returns what
// one pull brought together, and nothing newer than what that pull may
// still bring. So no receive hands out a first delivery older than one
// the puller already handed out, except an activation held back (see
// Puller.HoldBack), which newer messages pass.
package pull
