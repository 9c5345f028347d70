package saga

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// The outage stage: a step that fails because something it needs is
// unavailable (ErrUnavailable: the store, the server, a timeout engine, or
// a dependency the handler reported so) is not the message's failure.
// Settle leaves such a delivery to the runner (Outcome Waiting), which
// keeps it — renewing its lock, so that the outage spends none of its
// deliveries — and runs its step again after a backoff, until it works.
// Meanwhile the dispatcher's circuit is open: the workers receive nothing
// new while steps are waiting, and one message at a time otherwise (the
// probes of an outage whose waiting steps lost their locks). The first
// step that works again closes the circuit, which wakes every waiting
// step at once. Nothing of this counts against a RetryPolicy.

// Backoff of a waiting step's attempts: from probeFirst, doubling, up to
// probeMax. The circuit opens at a step's openAfter-th attempt that finds
// a dependency unavailable (after about 300 ms): one timeout on a loaded
// server does not stop the dispatcher's intake.
const (
	probeFirst = 100 * time.Millisecond
	probeMax   = 5 * time.Second
	openAfter  = 3
)

// unavailable reports whether a step's error is an outage rather than the
// message's failure: it matches ErrUnavailable and not ErrPermanent.
func unavailable(err error) bool {
	return err != nil && errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrPermanent)
}

// circuit is a dispatcher's record of an outage (see above).
type circuit struct {
	d *Dispatcher

	isOpen atomic.Bool // open, for the hot path's look without mu

	mu      sync.Mutex
	open    bool
	since   time.Time // when it opened
	cause   error     // the last step error that waited
	waits   int       // attempts that waited since it opened
	waiters int       // steps waiting now
	changed chan struct{}
}

func newCircuit(d *Dispatcher) *circuit { return &circuit{d: d, changed: make(chan struct{})} }

// signal wakes what waits for a change; c.mu is held.
func (c *circuit) signal() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// mayReceive waits until a worker may receive, and returns how many
// messages: batch while the circuit is closed, one while it is open and
// no step is waiting. It returns false when ctx ends.
func (c *circuit) mayReceive(ctx context.Context, batch int) (int, bool) {
	if !c.isOpen.Load() {
		return batch, true
	}
	for {
		c.mu.Lock()
		open, waiters, changed := c.open, c.waiters, c.changed
		c.mu.Unlock()
		switch {
		case !open:
			return batch, true
		case waiters == 0:
			return 1, true
		}
		select {
		case <-ctx.Done():
			return 0, false
		case <-changed:
		}
	}
}

// holdBatch holds the deliveries of a received batch that have not
// started (ds) while the circuit is open and steps are waiting — no slot
// would take them — renewing their locks, until it closes or no step is
// waiting any more. It reports whether it held them, and false when ctx
// ends.
func (c *circuit) holdBatch(ctx context.Context, ds []*transport.Delivery) (held, ok bool) {
	if !c.isOpen.Load() {
		return false, true // the hot path: no lock, no allocation
	}
	var lockLens []time.Duration
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		c.mu.Lock()
		open, waiters, changed := c.open, c.waiters, c.changed
		c.mu.Unlock()
		if !open || waiters == 0 {
			return held, true
		}
		if !held {
			held = true
			lockLens = make([]time.Duration, len(ds))
			for i, del := range ds {
				lockLens[i] = c.renew(ctx, del, 0)
			}
		}
		select {
		case <-ctx.Done():
			return held, false
		case <-changed:
		case <-tick.C:
			for i, del := range ds {
				if lockLens[i] >= 0 {
					lockLens[i] = c.renew(ctx, del, lockLens[i])
				}
			}
		}
	}
}

// worked records a step that did not wait: it closes the circuit.
func (c *circuit) worked() {
	if !c.isOpen.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.open {
		return
	}
	c.d.cfg.logger.LogAttrs(context.Background(), slog.LevelInfo, "saga: dependency back; receiving again",
		slog.String("queue", c.d.queueName), slog.Duration("waited", time.Since(c.since)), slog.Int("attempts", c.waits))
	c.open, c.cause, c.waits = false, nil, 0
	c.isOpen.Store(false)
	c.signal()
}

// wait keeps del, whose step failed with err (unavailable) on its
// attempt-th try (from 1), until its step should run again: after a
// backoff, or at once when another step closes the circuit. It renews
// del's lock meanwhile, and those of rest (the deliveries of del's batch
// that wait behind it). It returns false when del is no longer to be run:
// live ended (Run stops; del is abandoned for redelivery) or del's lock
// was lost (the server redelivers it).
func (c *circuit) wait(live context.Context, del *transport.Delivery, rest []*transport.Delivery, err error, attempt int) bool {
	if attempt < openAfter {
		// A single timeout under load is no outage yet: try again
		// soon, receiving on meanwhile, as an immediate retry would.
		select {
		case <-live.Done():
			actx, cancel := context.WithTimeout(context.WithoutCancel(live), 5*time.Second)
			_ = del.Abandon(actx)
			cancel()
			return false
		case <-time.After(probeFirst << (attempt - 1)):
			return true
		}
	}
	c.mu.Lock()
	if !c.open {
		c.open, c.since, c.waits = true, time.Now(), 0
		c.isOpen.Store(true)
		c.d.cfg.logger.LogAttrs(live, slog.LevelWarn, "saga: a dependency is unavailable; waiting for it, receiving nothing new meanwhile",
			slog.String("queue", c.d.queueName), slog.Any("error", err))
		c.signal()
	}
	c.cause = err
	c.waits++
	c.waiters++
	changed := c.changed
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.waiters--
		c.signal()
		c.mu.Unlock()
	}()

	delay := min(probeFirst<<min(attempt-1, 16), probeMax)
	timer := time.NewTimer(delay)
	defer timer.Stop()
	lockLen := c.renew(live, del, 0)
	if lockLen < 0 {
		return false
	}
	tick := time.NewTicker(renewEvery(lockLen)) // looks at the lock
	defer tick.Stop()
	for {
		select {
		case <-live.Done():
			actx, cancel := context.WithTimeout(context.WithoutCancel(live), 5*time.Second)
			_ = del.Abandon(actx)
			cancel()
			return false
		case <-changed:
			c.mu.Lock()
			open := c.open
			changed = c.changed
			c.mu.Unlock()
			if !open {
				return true // another step worked: try again at once
			}
		case <-timer.C:
			return true
		case <-tick.C:
			for _, next := range rest {
				c.renew(live, next, lockLen)
			}
			if c.renew(live, del, lockLen) < 0 {
				return false
			}
		}
	}
}

// renew renews del's lock when less than half of lockLen is left (always
// if lockLen is 0) and returns the lock's length as renewed, or -1 if the
// lock is lost or has run out (a renewal that fails for the outage is
// tried again while the lock lasts).
func (c *circuit) renew(ctx context.Context, del *transport.Delivery, lockLen time.Duration) time.Duration {
	left := time.Until(del.LockedUntil())
	if lockLen > 0 && left > lockLen/2 {
		return lockLen
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := del.RenewLock(rctx)
	cancel()
	switch {
	case err == nil:
		return time.Until(del.LockedUntil())
	case errors.Is(err, transport.ErrLockLost), errors.Is(err, transport.ErrAlreadySettled), errors.Is(err, transport.ErrClosed):
		return -1
	case time.Until(del.LockedUntil()) <= 0:
		return -1
	}
	return max(lockLen, left)
}

// Health is what Dispatcher.Health reports.
type Health struct {
	// Waiting is true while steps wait for a dependency that is
	// unavailable (the circuit is open): the dispatcher receives nothing
	// new meanwhile. A readiness check can report it.
	Waiting bool
	// Since is when the wait began; zero if not Waiting.
	Since time.Time
	// Attempts counts the step attempts that found the dependency
	// unavailable since then.
	Attempts int
	// Err is the last such attempt's error (it matches ErrUnavailable);
	// nil if not Waiting.
	Err error
}

// Health reports whether the dispatcher is waiting for a dependency that
// is unavailable (see ErrUnavailable and Waiting), since when and why: for
// a service's readiness check, or its status page.
func (d *Dispatcher) Health() Health {
	c := d.outage
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.open {
		return Health{}
	}
	return Health{Waiting: true, Since: c.since, Attempts: c.waits, Err: c.cause}
}
