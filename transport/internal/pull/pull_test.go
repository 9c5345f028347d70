package pull

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// newPuller returns a puller of a fresh work-queue stream's consumer, and
// a function that publishes body to the stream.
func newPuller(t *testing.T) (*Puller, func(body string)) {
	t.Helper()
	srv := testutil.StartServer(t, embedded.Options{})
	nc, err := srv.Connect()
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}, Retention: jetstream.WorkQueuePolicy})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "C", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	life, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	c := &Conn{
		NC:    nc,
		Check: func() error { return nil },
		Done:  life.Done(),
		APIContext: func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, 5*time.Second)
		},
	}
	p := New(c, cons, time.Minute)
	t.Cleanup(p.Close)
	publish := func(body string) {
		t.Helper()
		if _, err := js.Publish(ctx, "s", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	return p, publish
}

func bodies(hs []*Held) []string {
	var out []string
	for _, h := range hs {
		out = append(out, string(h.Msg.Data()))
	}
	return out
}

// A pull without waiting brings what the consumer holds, in stream order,
// and ends: Take hands it all out, oldest first.
func TestPullBringsInOrder(t *testing.T) {
	p, publish := newPuller(t)
	for i := range 3 {
		publish(fmt.Sprint(i))
	}
	pl, err := p.Request(10, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	p.WaitEnd(t.Context(), pl, time.Now().Add(10*time.Second))
	if ended, err := pl.Ended(); !ended || err != nil {
		t.Fatalf("after WaitEnd: ended %v, %v; want ended, nil", ended, err)
	}
	hs := p.Take(-1)
	if got, want := fmt.Sprint(bodies(hs)), "[0 1 2]"; got != want {
		t.Errorf("took %s, want %s", got, want)
	}
	for _, h := range hs {
		if err := h.Msg.DoubleAck(t.Context()); err != nil {
			t.Errorf("DoubleAck: %v", err)
		}
		if err := h.Msg.Ack(); !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			t.Errorf("Ack after DoubleAck: %v, want ErrMsgAlreadyAckd", err)
		}
	}
}

// What a pull brings after its receive stopped waiting is kept, for the
// next receive to take: nothing is lost to a receive that gave up.
func TestPullKeepsWhatArrivesLate(t *testing.T) {
	p, publish := newPuller(t)
	pl, err := p.Request(1, 5*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	// The receive gives up before anything arrives.
	p.Wait(t.Context(), pl, time.Now().Add(20*time.Millisecond))
	if hs := p.Take(1); len(hs) > 0 {
		t.Fatalf("took %v before anything was sent", bodies(hs))
	}
	publish("late")
	// The next receive finds it kept.
	p.Wait(t.Context(), nil, time.Now().Add(10*time.Second))
	if got := bodies(p.Take(1)); len(got) != 1 || got[0] != "late" {
		t.Errorf("took %v, want [late]", got)
	}
}

// A closed puller refuses new pulls.
func TestClosedPullerRefuses(t *testing.T) {
	p, _ := newPuller(t)
	p.Close()
	if _, err := p.Request(1, 0, true); !errors.Is(err, ErrClosed) {
		t.Errorf("Request after Close: %v, want ErrClosed", err)
	}
}
