package transport

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"
)

// QueueConfig describes a queue. OpenQueue creates the queue from it or
// updates an existing one; the zero value of each field picks its default.
type QueueConfig struct {
	// Name is 1–64 characters of [A-Za-z0-9_-]. Required.
	Name string
	// Partitions splits the queue into independent logs, each with its own
	// gap-free sequence (see Partition). A session always maps to one
	// partition; so does a MessageID, so duplicate detection holds.
	// Changing it on an existing queue is refused.
	// Default: 1. Maximum: 1024.
	Partitions int
	// RequiresSession makes every message carry a SessionID and be received
	// through AcceptSession or AcceptNextSession. Changing it is refused.
	// Default: false.
	RequiresSession bool
	// LockDuration is how long a received message stays locked to its
	// receiver, counted from when the receiver got it. RenewLock extends
	// it. The JetStream server redelivers a little later still (plus a
	// quarter, 0.5–5 s), so that a receiver that is slow to pick a message
	// up never settles it while someone else holds it. Default: 30s.
	LockDuration time.Duration
	// MaxDeliveryCount is how many deliveries a message gets; after the
	// last one (abandoned, or its lock expired) it is moved to the
	// dead-letter queue with reason ReasonMaxDeliveryCountExceeded.
	// Default: 10.
	MaxDeliveryCount int
	// DuplicateWindow is how long a MessageID is remembered for duplicate
	// detection after a message with it was accepted (or activated), across
	// server restarts; see the package documentation for the rules. On
	// JetStream each message with a MessageID is kept in the partition's
	// schedule stream for this long, so the window sizes that stream.
	// Default: 10m (Service Bus's default).
	DuplicateWindow time.Duration
	// MaxBytes caps the stored size of each partition's active messages; a
	// send that would exceed it fails with ErrQueueFull rather than
	// evicting anything. Scheduled messages are not capped (JetStream can
	// only cap a schedule stream by evicting pending schedules), and
	// activations are never dropped: on JetStream an activation into a full
	// partition waits until space frees; in memory it may exceed the cap.
	// On JetStream one broker sending never takes a partition past it (on
	// one server or a replicated queue); with several brokers sending the
	// check is approximate (see the package documentation); nothing is
	// ever dropped. Default: 0 (no cap).
	MaxBytes int64
	// Replicas is the JetStream replication factor. Default: 1.
	Replicas int
	// MemoryStorage keeps JetStream data in memory instead of files, losing
	// it on server restart. Default: false.
	MemoryStorage bool
	// CancelRecordTTL is how long the record of a cancellation is kept: for
	// that long Cancel of the same number answers ErrNotFound (after it,
	// ErrAlreadyActivated on JetStream), and the cancelled message's
	// MessageID stays taken. On JetStream the record also stops a
	// cancelled message that activated in the same instant from being
	// delivered, so it must exceed the longest time an activated message
	// may wait in the queue before it is received. Default: 7 days.
	CancelRecordTTL time.Duration
}

// Reasons the transport itself gives when it dead-letters a message.
const (
	ReasonMaxDeliveryCountExceeded = "MaxDeliveryCountExceeded"
)

const maxPartitions = 1024

// RedeliveryWindow returns how long a queue of this config may go on
// delivering a message again after its first delivery, when its
// receivers neither settle nor renew it: MaxDeliveryCount deliveries, each
// locked for as long as the broker enforces (LockDuration plus the grace
// the JetStream broker adds to it, a quarter of it within 0.5–5 s, rounded
// up to a second) and a second for the broker's expiry check. Fields left
// zero count as their defaults. A receiver that renews a lock extends it
// by as much as it renews.
func (c QueueConfig) RedeliveryWindow() time.Duration {
	deliveries := cmp.Or(c.MaxDeliveryCount, 10)
	lock := serverAckWait(cmp.Or(c.LockDuration, 30*time.Second))
	lock = (lock + time.Second - 1).Truncate(time.Second)
	return time.Duration(deliveries) * (lock + time.Second)
}

func (c QueueConfig) withDefaults() (QueueConfig, error) {
	if err := ValidateQueueName(c.Name); err != nil {
		return c, err
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Partitions == 0 {
		c.Partitions = 1
	}
	if c.MaxDeliveryCount == 0 {
		c.MaxDeliveryCount = 10
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	def(&c.LockDuration, 30*time.Second)
	def(&c.DuplicateWindow, 10*time.Minute)
	def(&c.CancelRecordTTL, 7*24*time.Hour)
	switch {
	case c.Partitions < 1 || c.Partitions > maxPartitions:
		return c, fmt.Errorf("%w: Partitions %d: must be 1-%d", ErrInvalidConfig, c.Partitions, maxPartitions)
	case c.LockDuration < 0, c.DuplicateWindow < 0, c.CancelRecordTTL < time.Second:
		return c, fmt.Errorf("%w: durations must be positive (CancelRecordTTL at least 1s)", ErrInvalidConfig)
	case c.MaxDeliveryCount < 1:
		return c, fmt.Errorf("%w: MaxDeliveryCount %d: must be at least 1", ErrInvalidConfig, c.MaxDeliveryCount)
	case c.Replicas < 1 || c.Replicas > 5:
		return c, fmt.Errorf("%w: Replicas %d: must be 1-5", ErrInvalidConfig, c.Replicas)
	case c.MaxBytes < 0:
		return c, fmt.Errorf("%w: MaxBytes %d: must not be negative", ErrInvalidConfig, c.MaxBytes)
	}
	return c, nil
}

// Option configures a Broker.
type Option interface{ apply(*options) error }

type optionFunc func(*options) error

func (f optionFunc) apply(o *options) error { return f(o) }

type options struct {
	logger     *slog.Logger
	prefix     string
	apiTimeout time.Duration
	clock      Clock
}

// WithLogger sets the logger for background failures. Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidOption)
		}
		o.logger = l
		return nil
	})
}

// WithPrefix sets the prefix of the JetStream stream names and subjects the
// broker uses, so that several applications can share one server.
// Default: "JETSAGA".
func WithPrefix(p string) Option {
	return optionFunc(func(o *options) error {
		if err := ValidateQueueName(p); err != nil {
			return fmt.Errorf("%w: prefix: %w", ErrInvalidOption, err)
		}
		o.prefix = p
		return nil
	})
}

// WithAPITimeout bounds each JetStream API call made without a context
// deadline of its own. Opening or attaching a queue, topic or
// subscription is different: it bounds each attempt of each partition's
// calls (and the dead-letter queue's), and an attempt it ends unanswered
// is made again until the caller's context ends (see the package
// documentation), so that a queue of many partitions, or an open on a
// busy cluster, ends with a definite answer however long it takes.
// Default: 5s.
func WithAPITimeout(d time.Duration) Option {
	return optionFunc(func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: API timeout %v: must be positive", ErrInvalidOption, d)
		}
		o.apiTimeout = d
		return nil
	})
}

// WithClock sets the clock of the in-memory broker. Default: the time
// package, which inside a testing/synctest bubble is virtual.
// The JetStream broker always uses the server's clock and ignores it.
func WithClock(c Clock) Option {
	return optionFunc(func(o *options) error {
		if c == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalidOption)
		}
		o.clock = c
		return nil
	})
}

func buildOptions(opts []Option) (options, error) {
	o := options{prefix: "JETSAGA", apiTimeout: 5 * time.Second, clock: systemClock{}}
	for _, opt := range opts {
		if err := opt.apply(&o); err != nil {
			return o, err
		}
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	return o, nil
}

// Clock is the time source of the in-memory broker.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has elapsed; stop
	// cancels the call if it has not started and reports whether it did.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
func (systemClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// exhaustedDescription is the dead-letter description of a message
// delivered count times, with MaxDeliveryCount max.
func exhaustedDescription(count, max int) string {
	return fmt.Sprintf("delivered %d times, MaxDeliveryCount is %d", count, max)
}
