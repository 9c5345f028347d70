package timeout

import (
	"context"
	"fmt"
	"time"
)

// Route sends timeouts due at least Beyond from now to Scheduler.
type Route struct {
	// Beyond is the shortest delay this route takes.
	Beyond time.Duration
	// Engine is the prefix of the refs Scheduler issues, e.g. "temporal".
	Engine string
	// Scheduler schedules the timeouts of this route.
	Scheduler Scheduler
}

// Router is a Scheduler that picks an engine by how far away a timeout is
// due: the route with the largest Beyond not above the delay, else
// Default. Cancel goes to the engine named in the ref.
type Router struct {
	// Default takes timeouts no route takes. Required.
	Default Scheduler
	// DefaultEngine is the ref prefix of Default. Default: TransportEngine.
	DefaultEngine string
	// Routes, in any order.
	Routes []Route
	// Now is the clock. Default: time.Now.
	Now func() time.Time
}

// Schedule schedules t on the engine its delay selects.
func (r *Router) Schedule(ctx context.Context, t Timeout) (Ref, error) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	delay := t.At.Sub(now())
	var best *Route
	for i := range r.Routes {
		rt := &r.Routes[i]
		if delay >= rt.Beyond && (best == nil || rt.Beyond > best.Beyond) {
			best = rt
		}
	}
	if best != nil {
		return best.Scheduler.Schedule(ctx, t)
	}
	return r.Default.Schedule(ctx, t)
}

// Cancel cancels ref on the engine that issued it.
func (r *Router) Cancel(ctx context.Context, ref Ref) error {
	for _, rt := range r.Routes {
		if rt.Engine == ref.Engine() {
			return rt.Scheduler.Cancel(ctx, ref)
		}
	}
	def := r.DefaultEngine
	if def == "" {
		def = TransportEngine
	}
	if ref.Engine() == def {
		return r.Default.Cancel(ctx, ref)
	}
	return fmt.Errorf("%w: no engine %q in router", ErrInvalidRef, ref.Engine())
}
