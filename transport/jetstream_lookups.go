package transport

import (
	"context"
	"sync"
)

// Cancel record lookups, gathered. Every pull that brings activations asks
// the schedule stream whether a cancel record landed for any of them (see
// cancelledActivations): a direct get that holds the stream's store lock,
// which the scheduler's activations wait for. When receivers keep up with
// a burst, each pull brings few activations, and a lookup per pull slowed
// the scheduler enough to tip nats-server into reloading the stream's last
// block after every activation (BENCHMARKS.md, "Two modes"). So the
// receivers of one partition in one broker share their lookups: while one
// is under way, the lookups asked meanwhile wait, and go out together as
// the next one, up to multiLastMax subjects each. A lookup answers for
// every subject it was asked, so sharing one changes nothing a receiver
// learns, and a failed one fails for each receiver that shared it; a
// receiver waits for at most the lookup under way and its own.

// lookupBatch is one lookup's subjects, gathered from the receivers that
// asked for them, and its answer.
type lookupBatch struct {
	filters []string
	found   []string
	err     error
	turn    chan struct{} // holds one token when it is this batch's turn: its taker makes the lookup
	done    chan struct{} // closed once found and err are set
}

// lookupGroup gathers the cancel record lookups of one partition.
type lookupGroup struct {
	mu      sync.Mutex
	running bool           // a lookup is under way
	next    []*lookupBatch // waiting for it to end, the last one still filling
}

// lookup returns the subjects of the cancel records found on filters (at
// most multiLastMax), sharing the lookup with the partition's other
// receivers (see above); do makes one lookup. One of the receivers that
// asked a batch makes its lookup, and then hands the turn on to the next
// batch, so each receiver makes at most one lookup.
func (g *lookupGroup) lookup(ctx context.Context, filters []string, do func(context.Context, []string) ([]string, error)) ([]string, error) {
	g.mu.Lock()
	if !g.running {
		g.running = true
		g.mu.Unlock()
		found, err := do(ctx, filters)
		g.handOn()
		return found, err
	}
	var b *lookupBatch
	if n := len(g.next); n > 0 && len(g.next[n-1].filters)+len(filters) <= multiLastMax {
		b = g.next[n-1]
	} else {
		b = &lookupBatch{turn: make(chan struct{}, 1), done: make(chan struct{})}
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
func (g *lookupGroup) handOn() {
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
