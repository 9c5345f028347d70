package saga

import (
	"fmt"
	"time"

	recordfmt "github.com/jetsaga/jetsaga/internal/record"
	"github.com/jetsaga/jetsaga/transport"
)

// The inbox: the identities of the messages an instance committed, kept
// while the queue could still deliver one of them again (its lock
// expiring MaxDeliveryCount times), whatever else reaches the instance
// meanwhile. The record's format is in internal/record (Remember, Seen).

// ErrInboxFull is the transient error of a step on an instance whose
// inbox holds InboxLimit messages committed within the inbox retention
// (WithInboxRetention): the step is not committed and is retried
// (RetryPolicy) once older entries have aged out, rather than forget a
// message the queue could still deliver again.
var ErrInboxFull = recordfmt.ErrInboxFull

// InboxLimit is the most messages an instance's inbox holds: more than
// this many steps on one instance within the inbox retention fail with
// ErrInboxFull. About 600 KB of record.
const InboxLimit = recordfmt.InboxLimit

// InboxMargin is what the default inbox retention adds to the time the
// queue can take to deliver a message again: for a redelivery that waits
// behind other steps (its lock renewed), and clocks of dispatchers that
// differ by a little.
const InboxMargin = 30 * time.Second

// InboxRetention returns the default inbox retention for a dispatcher's
// queue config: as long as the queue may deliver a committed message
// again (transport.QueueConfig.RedeliveryWindow: MaxDeliveryCount times the
// longest a delivery stays locked on the server) plus InboxMargin. With the defaults (10 deliveries, 30 s)
// 6 min 30 s; with a 5 s lock, 1 min 50 s.
func InboxRetention(qc transport.QueueConfig) time.Duration {
	return qc.RedeliveryWindow() + InboxMargin
}

// WithInboxRetention sets how long an instance's inbox keeps a committed
// message's identity, which makes a later delivery of the same message a
// duplicate. Default: InboxRetention of the queue config, as long as the
// queue may deliver the message again. The newest 128 are kept whatever
// their age. A shorter retention gives up exactly once for a message
// delivered again after it (a step applied twice); a longer one keeps
// more in the record of a busy instance (about 12 bytes a message).
func WithInboxRetention(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: inbox retention %v: must be positive", ErrInvalidOption, d)
		}
		c.inboxRetention = d
		return nil
	})
}

// inboxRetention is how long the dispatcher's steps keep identities in
// inboxes.
func (d *Dispatcher) inboxRetention() time.Duration {
	if d.cfg.inboxRetention > 0 {
		return d.cfg.inboxRetention
	}
	return InboxRetention(d.cfg.queue)
}
