package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

type greeted struct{ Who string }

type waved struct {
	Who   string
	Times int
}

// send puts m on q as a saga would: JSON under its type's message name.
func send(t *testing.T, q *transport.Queue, typ string, m any) {
	t.Helper()
	body, err := saga.JSON{}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	msg := &transport.Message{Body: body, Properties: map[string]string{saga.TypeProperty: typ}}
	if _, err := q.Send(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
}

// TestFeed checks that the feed prints every event in the demo's words
// and that Await finds the next event of a type for an ID, keeping the
// ones it passes over for later calls.
func TestFeed(t *testing.T) {
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	q, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: "events"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	p := NewPrinter(&out, 3)
	p.Start()
	f := NewFeed(p, q,
		Describe(func(v greeted) (string, string) { return v.Who, "greeted " + v.Who }),
		Describe(func(v waved) (string, string) { return v.Who, fmt.Sprintf("waved %d times", v.Times) }),
	)
	send(t, q, saga.MessageName[waved](), waved{Who: "ann", Times: 2})
	send(t, q, saga.MessageName[greeted](), greeted{Who: "bob"})
	send(t, q, "nobody.Knows", greeted{Who: "x"})
	send(t, q, saga.MessageName[greeted](), greeted{Who: "ann"})
	send(t, q, saga.MessageName[waved](), []byte("not an object"))

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { f.Run(ctx); close(done) }()

	g, e, err := Await[greeted](ctx, f, "ann")
	if err != nil {
		t.Fatal(err)
	}
	if g.Who != "ann" || e.Seq != 4 || e.ID != "ann" {
		t.Errorf("Await[greeted] ann: got %+v in %+v, want ann's greeting, seq 4", g, e)
	}
	w, e, err := Await[waved](ctx, f, "ann") // passed over, so stashed
	if err != nil {
		t.Fatal(err)
	}
	if w.Times != 2 || e.Seq != 1 {
		t.Errorf("Await[waved] ann: got %+v in %+v, want 2 waves, seq 1", w, e)
	}
	short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	defer stop()
	if _, _, err := Await[greeted](short, f, "carol"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Await for an event that never comes: got %v, want %v", err, context.DeadlineExceeded)
	}
	cancel()
	<-done

	for _, want := range []string{
		`(?m)^ \+\d+\.\d{3}s  ann  ← events seq=1 \(enqueued [+-]\d+\.\d{3}s\)  waved 2 times$`,
		`(?m)^ \+\d+\.\d{3}s  bob  ← events seq=2 .*  greeted bob$`,
		`(?m)^ \+\d+\.\d{3}s       ← events seq=3 .*  saga: unknown message type: "nobody.Knows"$`,
		`(?m)^ \+\d+\.\d{3}s  ann  ← events seq=4 .*  greeted ann$`,
		`← events seq=5 .*  saga: malformed message: demo.waved: `,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("output lacks %s:\n%s", want, out.String())
		}
	}
}

func TestPrinter(t *testing.T) {
	var out bytes.Buffer
	p := NewPrinter(&out, 5)
	p.Start()
	start := p.Started()
	p.Printf("plain %d", 1)
	p.Say("ann", "said %s", "hi")
	if got, want := p.At(start.Add(1234*time.Millisecond)), "+1.234s"; got != want {
		t.Errorf("At: got %s, want %s", got, want)
	}
	if got, want := p.At(start.Add(-time.Second)), "-1.000s"; got != want {
		t.Errorf("At: got %s, want %s", got, want)
	}
	if !regexp.MustCompile(`^plain 1\n \+0\.\d{3}s  ann    said hi\n$`).MatchString(out.String()) {
		t.Errorf("got %q", out.String())
	}
}
