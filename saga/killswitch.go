package saga

import (
	"fmt"
	"sync"
	"time"
)

// KillSwitch is MassTransit's kill switch for failures a handler does
// not classify: when a large share of a dispatcher's recent steps fail
// with ordinary errors — a dependency is down and the handlers say only
// "error" — it trips, and for Pause the failing steps wait as they do in
// an outage (ErrUnavailable: counted against no retry policy, never
// dead-lettered, receiving paused) instead of burning their retries and
// flooding the dead-letter queue. Once Pause has passed, failures count
// again, and the switch watches a new window. Errors matching
// ErrPermanent always go by the policy. Off unless WithKillSwitch.
type KillSwitch struct {
	// TripThreshold is the share of failed steps, of those settled in
	// the window, at which the switch trips: above 0, at most 1.
	// Default: 0.5.
	TripThreshold float64
	// ActivityThreshold is how many steps the window must have settled
	// before the share counts. Default: 20.
	ActivityThreshold int
	// Window is how long a window of counted steps lasts. Default: 1m.
	Window time.Duration
	// Pause is how long a tripped switch makes failing steps wait.
	// Default: 1m.
	Pause time.Duration
}

// WithKillSwitch turns the kill switch on (see KillSwitch; zero fields
// take their defaults). Off by default: a dispatcher without it counts
// every failure that is not ErrUnavailable against the message's retry
// policy.
func WithKillSwitch(k KillSwitch) Option {
	return optionFunc(func(c *config) error {
		if k.TripThreshold == 0 {
			k.TripThreshold = 0.5
		}
		if k.ActivityThreshold == 0 {
			k.ActivityThreshold = 20
		}
		if k.Window == 0 {
			k.Window = time.Minute
		}
		if k.Pause == 0 {
			k.Pause = time.Minute
		}
		if k.TripThreshold < 0 || k.TripThreshold > 1 || k.ActivityThreshold < 0 || k.Window < 0 || k.Pause < 0 {
			return fmt.Errorf("%w: kill switch %+v: threshold in (0, 1], the others not negative", ErrInvalidOption, k)
		}
		c.killSwitch = &k
		return nil
	})
}

// killSwitch counts a dispatcher's settled steps (see KillSwitch).
type killSwitch struct {
	cfg KillSwitch
	now func() time.Time

	mu          sync.Mutex
	windowStart time.Time
	steps, bad  int
	trippedAt   time.Time // zero if not tripped
}

func newKillSwitch(cfg *KillSwitch, now func() time.Time) *killSwitch {
	if cfg == nil {
		return nil
	}
	return &killSwitch{cfg: *cfg, now: now}
}

// failed counts a step that failed with an ordinary error and reports
// whether the switch is tripped: the step then waits instead of counting.
func (k *killSwitch) failed() bool {
	if k == nil {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now()
	if k.tripped(now) {
		return true
	}
	k.count(now, true)
	if k.steps >= k.cfg.ActivityThreshold && float64(k.bad) >= k.cfg.TripThreshold*float64(k.steps) {
		k.trippedAt = now
		return true
	}
	return false
}

// settled counts a step that did not fail.
func (k *killSwitch) settled() {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.count(k.now(), false)
}

// tripped reports whether the switch is tripped at now, resetting it
// (and starting a new window) once Pause has passed; k.mu is held.
func (k *killSwitch) tripped(now time.Time) bool {
	if k.trippedAt.IsZero() {
		return false
	}
	if now.Sub(k.trippedAt) < k.cfg.Pause {
		return true
	}
	k.trippedAt, k.windowStart, k.steps, k.bad = time.Time{}, now, 0, 0
	return false
}

// count adds a step to the window, starting a new one when it is over;
// k.mu is held.
func (k *killSwitch) count(now time.Time, bad bool) {
	if now.Sub(k.windowStart) >= k.cfg.Window {
		k.windowStart, k.steps, k.bad = now, 0, 0
	}
	k.steps++
	if bad {
		k.bad++
	}
}
