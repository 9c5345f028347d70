package sagatest

import (
	"context"
	"errors"
	"sync"
)

// ErrAnswerLost is what a Provider's Call returns for a call it made but
// whose answer it drops (LoseAnswers): the effect happened, the caller
// cannot know it — a response lost on the wire, a timeout after the
// provider acted.
var ErrAnswerLost = errors.New("sagatest: the provider acted, and its answer was lost")

// Provider is a fake of an outside service that honours idempotency keys
// the way Stripe's API does, for tests of handlers that call it through
// saga.Call: the first call with a key acts (do runs, once) and
// remembers its result; a later call with the same key acts no more and
// returns that result. Executions counts what happened in the outside
// world; Calls what was asked.
type Provider[R any] struct {
	do func(key string, n int) R

	mu    sync.Mutex
	done  map[string]R
	calls map[string]int
	lose  int
}

// NewProvider returns a Provider whose n-th execution (from 1), with key,
// results in do(key, n).
func NewProvider[R any](do func(key string, n int) R) *Provider[R] {
	return &Provider[R]{do: do, done: map[string]R{}, calls: map[string]int{}}
}

// Call is the provider's API: pass it (or a function that calls it) to
// saga.Call. It returns ctx's error without acting if ctx has ended.
func (p *Provider[R]) Call(ctx context.Context, key string) (R, error) {
	var zero R
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[key]++
	r, ok := p.done[key]
	if !ok {
		r = p.do(key, len(p.done)+1)
		p.done[key] = r
	}
	if p.lose > 0 {
		p.lose--
		return zero, ErrAnswerLost
	}
	return r, nil
}

// Lookup reports what the call with key did, for saga.ReconcileWith: its
// result and true if it acted, false if no call with key ever came.
func (p *Provider[R]) Lookup(_ context.Context, key string) (R, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.done[key]
	return r, ok, nil
}

// LoseAnswers makes the next n calls act and then fail with ErrAnswerLost.
func (p *Provider[R]) LoseAnswers(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lose = n
}

// Executions returns how many times the provider acted: the number of
// distinct keys it was called with.
func (p *Provider[R]) Executions() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.done)
}

// Calls returns how many times the provider was called with key.
func (p *Provider[R]) Calls(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[key]
}

// Reset forgets every call, for the next run of an Explore.
func (p *Provider[R]) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done, p.calls, p.lose = map[string]R{}, map[string]int{}, 0
}
