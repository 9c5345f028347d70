package lookup

import (
	"context"
	"sync"
)

// MaxFilters bounds the subjects of one lookup: one multi_last direct get
// (the server answers at most 1024 messages).
const MaxFilters = 256

// batch is one lookup's subjects, gathered from the receivers that asked
// for them, and its answer.
type batch struct {
	filters []string
	found   []string
	err     error
	turn    chan struct{} // holds one token when it is this batch's turn: its taker makes the lookup
	done    chan struct{} // closed once found and err are set
}

// Group gathers the cancel record lookups of one partition. Its zero
// value is ready to use.
type Group struct {
	mu      sync.Mutex
	running bool     // a lookup is under way
	next    []*batch // waiting for it to end, the last one still filling
}

// Lookup returns the subjects of the cancel records found on filters (at
// most MaxFilters), sharing the lookup with the partition's other
// receivers (see the package documentation); do makes one lookup. One of
// the receivers that asked a batch makes its lookup, and then hands the
// turn on to the next batch, so each receiver makes at most one lookup.
func (g *Group) Lookup(ctx context.Context, filters []string, do func(context.Context, []string) ([]string, error)) ([]string, error) {
	g.mu.Lock()
	if !g.running {
		g.running = true
		g.mu.Unlock()
		found, err := do(ctx, filters)
		g.handOn()
		return found, err
	}
	var b *batch
	if n := len(g.next); n > 0 && len(g.next[n-1].filters)+len(filters) <= MaxFilters {
		b = g.next[n-1]
	} else {
		b = &batch{turn: make(chan struct{}, 1), done: make(chan struct{})}
		g.next = append(g.next, b)
	}
	b.filters = append(b.filters, filters...)
	g.mu.Unlock()
	select {
	case <-b.done:
	case <-b.turn:
		// Out of g.next, so no one adds to b.filters any more.
		b.found, b.err = do(ctx, b.filters)
		close(b.done)
		g.handOn()
	}
	return b.found, b.err
}

// handOn gives the turn to the first batch waiting, or ends the run.
func (g *Group) handOn() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.next) == 0 {
		g.running = false
		return
	}
	b := g.next[0]
	g.next = g.next[1:]
	b.turn <- struct{}{}
}
