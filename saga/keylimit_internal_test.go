package saga

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

func keyed(key string, i int) *transport.Delivery {
	return &transport.Delivery{Message: &transport.Message{PartitionKey: key, MessageID: fmt.Sprint(key, i)}}
}

// The limiter admits n per key, sets the rest aside in the order they
// came, hands them out one per step that ends, holds receiving while the
// backlog is full, and forgets a key once it has nothing in flight.
func TestKeyLimiter(t *testing.T) {
	l := newKeyLimiter(2, 3)
	for i := range 2 {
		if ok, _ := l.admit(keyed("hot", i), holdPlan{}); !ok {
			t.Fatalf("hot %d not admitted under the limit", i)
		}
	}
	for i := 2; i < 5; i++ {
		if ok, ab := l.admit(keyed("hot", i), holdPlan{}); ok || ab {
			t.Fatalf("hot %d over the limit: admitted %v, abandon %v; want set aside", i, ok, ab)
		}
	}
	if ok, _ := l.admit(keyed("cold", 0), holdPlan{}); !ok {
		t.Fatal("a cold key waits behind a hot one")
	}
	if ok, _ := l.admit(keyed("", 0), holdPlan{}); !ok {
		t.Fatal("a message without a key is limited")
	}
	// Three set aside: the backlog is full, receiving waits.
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if l.waitRoom(ctx) {
		t.Fatal("waitRoom returned with the backlog full")
	}
	room := make(chan bool)
	go func() { room <- l.waitRoom(t.Context()) }()
	next, ok := l.release("hot")
	if !ok || next.del.MessageID != "hot2" {
		t.Fatalf("release(hot) = %v, %v; want hot2, the first set aside", next.del, ok)
	}
	if !<-room {
		t.Fatal("waitRoom did not return once a set-aside delivery was taken")
	}
	for _, want := range []string{"hot3", "hot4"} {
		if next, ok := l.release("hot"); !ok || next.del.MessageID != want {
			t.Fatalf("release(hot): %v, want %s", ok, want)
		}
	}
	for range 2 {
		if _, ok := l.release("hot"); ok {
			t.Fatal("release(hot) handed out a delivery with none set aside")
		}
	}
	l.release("cold")
	l.release("")
	if len(l.inFlight) != 0 || len(l.aside) != 0 || l.n != 0 {
		t.Errorf("after every step ended: in flight %v, aside %v, n %d; want none kept", l.inFlight, l.aside, l.n)
	}
	// Once closed, what is set aside is handed back, and a delivery over
	// the limit is to be abandoned.
	l.admit(keyed("k", 0), holdPlan{})
	l.admit(keyed("k", 1), holdPlan{})
	l.admit(keyed("k", 2), holdPlan{})
	if back := l.close(); len(back) != 1 || back[0].MessageID != "k2" {
		t.Fatalf("close handed back %v, want k2", back)
	}
	if ok, ab := l.admit(keyed("k", 3), holdPlan{}); ok || !ab {
		t.Fatalf("after close, over the limit: admitted %v, abandon %v; want abandon", ok, ab)
	}
}
