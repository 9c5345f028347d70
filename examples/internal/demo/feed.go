package demo

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// Event is a message the user's service received on the events queue.
type Event struct {
	Seq        uint64
	EnqueuedAt time.Time
	// ID is whom the event is about: the saga instance, a login or an
	// account.
	ID string
	// Body is the decoded message; nil if its type is unknown.
	Body any
}

// Decoder describes the events of one type in words. Describe makes one.
type Decoder struct {
	typ      saga.MessageType
	goType   reflect.Type
	describe func(v any) (id, text string)
}

// Describe returns the Decoder of events of type M, which travel under
// saga.MessageName[M] and are JSON-encoded. describe says whom an event is
// about and what it says, in the demo's words.
func Describe[M any](describe func(M) (id, text string)) Decoder {
	return Decoder{
		typ:      saga.TypeOf[M](),
		goType:   reflect.TypeFor[M](),
		describe: func(v any) (string, string) { return describe(v.(M)) },
	}
}

// Feed consumes the events queue, as the user's service would: it prints
// each message as it arrives and passes it on to the scenario, which
// waits for the ones it expects with Await.
type Feed struct {
	p        *Printer
	q        *transport.Queue
	dec      *saga.Decoder
	describe map[reflect.Type]func(v any) (id, text string)
	ch       chan Event
	stash    []Event // received, not yet awaited
}

// NewFeed returns a Feed on the events queue q that prints with p and
// decodes the event types of decoders. Run consumes the queue.
func NewFeed(p *Printer, q *transport.Queue, decoders ...Decoder) *Feed {
	f := &Feed{p: p, q: q, describe: make(map[reflect.Type]func(any) (string, string)), ch: make(chan Event, 64)}
	types := make([]saga.MessageType, len(decoders))
	for i, d := range decoders {
		types[i] = d.typ
	}
	dec, err := saga.NewDecoder(saga.JSON{}, types...)
	if err != nil {
		panic(err) // two event types under one name: a bug in the demo
	}
	f.dec = dec
	for _, d := range decoders {
		f.describe[d.goType] = d.describe
	}
	return f
}

// Run receives, prints and completes events until ctx ends.
func (f *Feed) Run(ctx context.Context) {
	for {
		ds, err := f.q.Receive(ctx, 16)
		if err != nil {
			if ctx.Err() == nil {
				f.p.Say("", "receiving events: %v", err)
			}
			return
		}
		for _, d := range ds {
			e, text := f.decode(d.Message)
			f.p.Say(e.ID, "← %s seq=%d (enqueued %s)  %s", f.q.Name(), d.Seq, f.p.At(d.EnqueuedAt), text)
			if err := d.Complete(context.WithoutCancel(ctx)); err != nil {
				f.p.Say("", "completing event: %v", err)
			}
			select {
			case f.ch <- e:
			case <-ctx.Done():
				return
			}
		}
	}
}

// decode decodes an event with the saga.Decoder of the feed's types and
// describes it in words.
func (f *Feed) decode(m *transport.Message) (Event, string) {
	e := Event{Seq: m.Seq, EnqueuedAt: m.EnqueuedAt}
	v, err := f.dec.Decode(m)
	if err != nil {
		return e, err.Error()
	}
	var text string
	e.ID, text = f.describe[reflect.TypeOf(v)](v)
	e.Body = v
	return e, text
}

// Await returns the next event of type M about id, keeping the others for
// later calls. Only the scenario's goroutine calls it.
func Await[M any](ctx context.Context, f *Feed, id string) (M, Event, error) {
	match := func(e Event) (M, bool) {
		m, ok := e.Body.(M)
		return m, ok && e.ID == id
	}
	for i, e := range f.stash {
		if m, ok := match(e); ok {
			f.stash = append(f.stash[:i], f.stash[i+1:]...)
			return m, e, nil
		}
	}
	for {
		select {
		case e := <-f.ch:
			if m, ok := match(e); ok {
				return m, e, nil
			}
			f.stash = append(f.stash, e)
		case <-ctx.Done():
			var zero M
			return zero, Event{}, fmt.Errorf("waiting for %s for %s: %w", saga.MessageName[M](), id, context.Cause(ctx))
		}
	}
}
