package sagatest

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"testing/synctest"
	"time"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// dueOf is when d was due: a timeout's due time, else when it was
// enqueued.
func dueOf(d *transport.Delivery) time.Time {
	if at, err := time.Parse(time.RFC3339Nano, d.Properties[timeout.PropertyDue]); err == nil {
		return at
	}
	return d.EnqueuedAt
}

// fairBatch is how many ready messages the Env's dispatcher takes at
// once, and serves round-robin across keys.
const fairBatch = 64

// fairOrder orders ds, messages ready at once, round-robin across their
// PartitionKeys: the first message of each key in the order the keys
// first appear, then the second of each, and so on; messages of one key
// (and those without a key, which share the key "") keep their queue
// order. Timeouts that come due at the same instant are ready at once, so
// a burst of one key's timeouts delays another key's by at most one step
// per key — the fairness a dispatcher gets from partitions by key and
// saga.WithKeyLimit, made deterministic on the virtual clock.
func fairOrder(ds []*transport.Delivery) []*transport.Delivery {
	if len(ds) < 2 {
		return ds
	}
	var keys []string
	byKey := make(map[string][]*transport.Delivery)
	for _, d := range ds {
		if _, ok := byKey[d.PartitionKey]; !ok {
			keys = append(keys, d.PartitionKey)
		}
		byKey[d.PartitionKey] = append(byKey[d.PartitionKey], d)
	}
	if len(keys) == 1 {
		return ds
	}
	// Timeouts due at the same instant become ready in no fixed order:
	// the keys are served by their earliest due time, then by name.
	first := make(map[string]time.Time, len(keys))
	for _, d := range ds {
		if at := dueOf(d); first[d.PartitionKey].IsZero() || at.Before(first[d.PartitionKey]) {
			first[d.PartitionKey] = at
		}
	}
	slices.SortFunc(keys, func(a, b string) int {
		return cmp.Or(first[a].Compare(first[b]), strings.Compare(a, b))
	})
	out := make([]*transport.Delivery, 0, len(ds))
	for len(out) < len(ds) {
		for _, k := range keys {
			if q := byKey[k]; len(q) > 0 {
				out = append(out, q[0])
				byKey[k] = q[1:]
			}
		}
	}
	return out
}

// readyAtOnce adds to ds, just received, the rest of what is ready at
// this instant (up to fairBatch in all): timeouts due at one instant are
// activated one by one, and the receive that returned ds may have come
// before the others. It waits for the bubble to be still; if the test is
// waiting for that itself (settle), it asks settle to hand it the wait.
func (e *Env) readyAtOnce(ctx context.Context, ds []*transport.Delivery) []*transport.Delivery {
	e.mu.Lock()
	exploring := e.exploring
	e.mu.Unlock()
	if exploring {
		// Explore holds timeouts it received itself, which the count of
		// active messages below would wait for; it orders its inputs.
		return ds
	}
	handed := false
	select {
	case e.waitLock <- struct{}{}:
	default:
		e.mu.Lock()
		e.wantQuiet, handed = true, true
		e.mu.Unlock()
		e.waitLock <- struct{}{} // settle sees wantQuiet and lets go
	}
	synctest.Wait()
	if handed {
		e.mu.Lock()
		e.wantQuiet = false
		e.mu.Unlock()
	}
	<-e.waitLock
	if handed {
		select {
		case e.quietDone <- struct{}{}:
		default:
		}
	}
	active := 0
	for m, err := range e.q.Browse(ctx, 0) {
		if err != nil {
			return ds
		}
		if m.State == transport.Active {
			active++
		}
	}
	if more := min(active, fairBatch) - len(ds); more > 0 {
		if next, err := e.q.Receive(ctx, more); err == nil {
			ds = append(ds, next...)
		}
	}
	return ds
}

func (e *Env) setExploring(on bool) {
	e.mu.Lock()
	e.exploring = on
	e.mu.Unlock()
}

// ServedKeys returns the PartitionKey of each message the dispatcher
// handled that had one, in the order it handled them: the order in which
// keys were served. Timeouts carry their instance's key
// (saga.PartitionKeyBy; by default the key of the message that started
// the instance), and messages that are ready at once, such as timeouts
// due at the same instant, are served round-robin across keys, the first
// of each key in the order the keys first appear in the queue, then the
// second of each, and so on (up to 64 messages at a time). Messages of
// one key keep their queue order.
func (e *Env) ServedKeys() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, m := range e.handled {
		if m.PartitionKey != "" {
			out = append(out, m.PartitionKey)
		}
	}
	return out
}
