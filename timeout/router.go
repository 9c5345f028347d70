package timeout

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"time"
)

// Route sends some timeouts to an engine: those of the sagas it names (all
// if none) that are due at least Beyond from now.
type Route struct {
	// Beyond is the shortest delay this route takes (0: any delay).
	Beyond time.Duration
	// Sagas, if set, limits the route to timeouts whose Timeout.Saga is
	// one of these saga types.
	Sagas []string
	// Engine is the prefix of the refs Scheduler issues, e.g. "temporal".
	// Required.
	Engine string
	// Scheduler schedules the timeouts of this route. Required.
	Scheduler Scheduler
}

// Router is a Scheduler that picks an engine for each timeout:
//
//  1. the engine a Timeout asks for (Timeout.Engine), if it is Default's
//     or a route's;
//  2. else, among the routes that take the timeout (its saga is in
//     Sagas, or Sagas is empty, and it is due at least Beyond from now),
//     one naming its saga before one for any saga, then the one with the
//     largest Beyond;
//  3. else Default.
//
// Cancel goes to the engine named in the ref, so changing the routes
// never strands a timeout: ones already scheduled stay on the engine that
// holds them, fire there, and are cancelled there, as long as that engine
// is still in the Router (as Default or in a route, even one that no
// longer matches anything: Beyond math.MaxInt64) and its workers run.
// Pending lists every engine.
type Router struct {
	// Default takes timeouts no route takes. Required.
	Default Scheduler
	// DefaultEngine is the ref prefix of Default. Default: QueueEngine.
	DefaultEngine string
	// Routes, in any order.
	Routes []Route
	// Now is the clock. Default: time.Now.
	Now func() time.Time
}

func (r *Router) defaultEngine() string {
	if r.DefaultEngine == "" {
		return QueueEngine
	}
	return r.DefaultEngine
}

// Engines returns the names of the router's engines: DefaultEngine first,
// then the routes' in order, each once.
func (r *Router) Engines() []string {
	out := []string{r.defaultEngine()}
	for _, rt := range r.Routes {
		if !slices.Contains(out, rt.Engine) {
			out = append(out, rt.Engine)
		}
	}
	return out
}

// engine returns the scheduler issuing refs of engine name, or nil.
func (r *Router) engine(name string) Scheduler {
	if name == r.defaultEngine() {
		return r.Default
	}
	for _, rt := range r.Routes {
		if rt.Engine == name {
			return rt.Scheduler
		}
	}
	return nil
}

// pick returns the scheduler for t.
func (r *Router) pick(t Timeout) (Scheduler, error) {
	if t.Engine != "" {
		if s := r.engine(t.Engine); s != nil {
			return s, nil
		}
		return nil, fmt.Errorf("%w: timeout %s asks for engine %q, which the router does not have", ErrInvalidTimeout, t.ID, t.Engine)
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	delay := t.At.Sub(now())
	var best *Route
	for i := range r.Routes {
		rt := &r.Routes[i]
		named := slices.Contains(rt.Sagas, t.Saga)
		if rt.Beyond > 0 && delay < rt.Beyond || len(rt.Sagas) > 0 && !named { // Beyond 0 takes past-due ones too
			continue
		}
		if best == nil {
			best = rt
			continue
		}
		bestNamed := len(best.Sagas) > 0
		if named && !bestNamed || named == bestNamed && rt.Beyond > best.Beyond {
			best = rt
		}
	}
	if best != nil {
		return best.Scheduler, nil
	}
	return r.Default, nil
}

// Schedule schedules t on the engine the Router picks for it.
func (r *Router) Schedule(ctx context.Context, t Timeout) (Ref, error) {
	if err := t.validate(); err != nil {
		return "", err
	}
	s, err := r.pick(t)
	if err != nil {
		return "", err
	}
	return s.Schedule(ctx, t)
}

// Cancel cancels ref on the engine that issued it.
func (r *Router) Cancel(ctx context.Context, ref Ref) error {
	if s := r.engine(ref.Engine()); s != nil {
		return s.Cancel(ctx, ref)
	}
	return fmt.Errorf("%w: no engine %q in router", ErrInvalidRef, ref.Engine())
}

// Pending lists the pending timeouts of every engine, Default first, then
// the routes' in order (an engine in several routes is listed once). An
// engine that cannot list yields an error matching ErrNoListing, and the
// listing goes on with the next engine if the caller continues.
func (r *Router) Pending(ctx context.Context, f Filter) iter.Seq2[Pending, error] {
	return func(yield func(Pending, error) bool) {
		for _, name := range r.Engines() {
			for p, err := range List(ctx, r.engine(name), f) {
				if err != nil {
					err = fmt.Errorf("engine %s: %w", name, err)
				}
				if !yield(p, err) {
					return
				}
				if err != nil {
					break
				}
			}
		}
	}
}
