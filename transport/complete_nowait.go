package transport

import "context"

// CompleteNoWait removes the message from the queue as Complete does, but
// does not wait for the broker to confirm it: nil means the request was
// sent (or, on a broker without such a request, done), not that it took
// effect. If it is lost — the connection drops, the server restarts
// before it is applied — the message is redelivered once its lock
// expires. Use it only where a redelivery is harmless, such as a receiver
// that deduplicates what it received. On JetStream it is an ack without
// a reply, which saves the receiver a round trip per message; the memory
// broker completes at once.
//
// It returns ErrLockLost if the lock already expired, ErrAlreadySettled
// if the delivery was settled before.
func (d *Delivery) CompleteNoWait(ctx context.Context) error {
	return d.settle(func() error { return d.s.completeNoWait(ctx) })
}
