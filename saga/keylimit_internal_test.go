package saga

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

func keyed(key string, i int) *transport.Delivery {
	return &transport.Delivery{Message: &transport.Message{PartitionKey: key, MessageID: fmt.Sprint(key, i)}}
}

// While another key's message waits for a slot, the limiter admits n
// per key, sets the rest aside in the order they came, hands them out one
// per step that ends, holds receiving from a full backlog's partition
// until half of it is taken, and forgets a key once it has nothing in
// flight.
func TestKeyLimiter(t *testing.T) {
	l := newKeyLimiter(2, 4)
	l.waitSlot("waiting") // another key's message, waiting for a slot
	for i := range 2 {
		if ok, _ := l.admit(keyed("hot", i), holdPlan{}, nil); !ok {
			t.Fatalf("hot %d not admitted under the limit", i)
		}
	}
	for i := 2; i < 6; i++ {
		if ok, ab := l.admit(keyed("hot", i), holdPlan{}, nil); ok || ab {
			t.Fatalf("hot %d over the limit while another key waits: admitted %v, abandon %v; want set aside", i, ok, ab)
		}
	}
	if ok, _ := l.admit(keyed("cold", 0), holdPlan{}, nil); !ok {
		t.Fatal("a cold key waits behind a hot one")
	}
	if ok, _ := l.admit(keyed("", 0), holdPlan{}, nil); !ok {
		t.Fatal("a message without a key is limited")
	}
	// Four set aside: the backlog is full, receiving waits until half of
	// it is taken.
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, _, ok := l.waitRoom(ctx, 1); ok {
		t.Fatal("waitRoom returned with the backlog full")
	}
	room := make(chan bool, 1)
	go func() {
		_, _, ok := l.waitRoom(t.Context(), 1)
		room <- ok
	}()
	for _, want := range []string{"hot2", "hot3"} {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		if _, _, ok := l.waitRoom(ctx, 1); ok {
			t.Fatalf("waitRoom returned with %d of the backlog of 4 set aside, want it to wait until 2", l.byPart[0])
		}
		cancel()
		if next, ok := l.release("hot"); !ok || next.del.MessageID != want {
			t.Fatalf("release(hot) = %v, %v; want %s, the first set aside", next.del, ok, want)
		}
	}
	if !<-room {
		t.Fatal("waitRoom did not return once half the backlog was taken")
	}
	for _, want := range []string{"hot4", "hot5"} {
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
	l.gotSlot("waiting")
	if len(l.inFlight) != 0 || len(l.aside) != 0 || len(l.byPart) != 0 || len(l.heldBack) != 0 || len(l.waiting) != 0 || l.waitings != 0 {
		t.Errorf("after every step ended: in flight %v, aside %v, per partition %v, held back %v, waiting %v (%d); want none kept",
			l.inFlight, l.aside, l.byPart, l.heldBack, l.waiting, l.waitings)
	}
	// Once closed, what is set aside is handed back, and a delivery over
	// the limit is to be abandoned.
	l.waitSlot("waiting")
	l.admit(keyed("k", 0), holdPlan{}, nil)
	l.admit(keyed("k", 1), holdPlan{}, nil)
	l.admit(keyed("k", 2), holdPlan{}, nil)
	if back := l.close(); len(back) != 1 || back[0].MessageID != "k2" {
		t.Fatalf("close handed back %v, want k2", back)
	}
	if ok, ab := l.admit(keyed("k", 3), holdPlan{}, nil); ok || !ab {
		t.Fatalf("after close, over the limit: admitted %v, abandon %v; want abandon", ok, ab)
	}
}

// The limit is work-conserving: a key alone runs more than its limit; as
// soon as another key's message waits for a slot (admitted, or behind in
// the worker's batch), the key's new deliveries are set aside, and a step
// of a key over its limit that ends hands out none of them; once the
// other key's message has its slot, the key runs over its limit again.
func TestKeyLimiterWorkConserving(t *testing.T) {
	l := newKeyLimiter(2, 100)
	for i := range 5 {
		if ok, _ := l.admit(keyed("a", i), holdPlan{}, nil); !ok {
			t.Fatalf("a %d, of a key alone, not admitted: %d in flight over the limit of 2 with no other key waiting", i, l.inFlight["a"])
		}
	}
	// Another key's message behind it in the batch.
	if ok, _ := l.admit(keyed("a", 5), holdPlan{}, []*transport.Delivery{keyed("b", 0)}); ok {
		t.Fatal("a 5, over the limit with b behind it in the batch, admitted; want set aside")
	}
	// b admitted, waiting for a slot.
	if ok, _ := l.admit(keyed("b", 0), holdPlan{}, nil); !ok {
		t.Fatal("b 0 not admitted")
	}
	l.waitSlot("b")
	if ok, _ := l.admit(keyed("a", 6), holdPlan{}, nil); ok {
		t.Fatal("a 6, over the limit while b waits for a slot, admitted; want set aside")
	}
	if _, ok := l.release("a"); ok {
		t.Fatal("a step of a, over its limit, ended while b waits: handed out a set-aside delivery, want none (5 to 4 in flight)")
	}
	l.gotSlot("b")
	if next, ok := l.release("a"); !ok || next.del.MessageID != "a5" {
		t.Fatalf("a step of a ended with no other key waiting: release = %v, %v; want a5", next.del, ok)
	}
	if ok, _ := l.admit(keyed("a", 7), holdPlan{}, nil); ok {
		t.Fatal("a 7 admitted ahead of a 6, set aside before it")
	}
}

// keyedIn is keyed in partition p.
func keyedIn(key string, i, p int) *transport.Delivery {
	d := keyed(key, i)
	d.Seq = uint64(p)<<transport.PartitionShift | uint64(i+1)
	return d
}

// On a queue of several partitions, a full backlog holds back only the
// partition it is in: the workers go on receiving from the others, and
// stop only once every partition's backlog is full.
func TestKeyLimiterPartitions(t *testing.T) {
	const parts = 3
	l := newKeyLimiter(1, 2)
	l.waitSlot("waiting") // another key's message: the limit applies
	if from, _, ok := l.waitRoom(t.Context(), parts); !ok || from != nil {
		t.Fatalf("waitRoom with nothing set aside = %v, %v; want all partitions (nil)", from, ok)
	}
	l.admit(keyedIn("a", 0, 1), holdPlan{}, nil) // in flight
	l.admit(keyedIn("a", 1, 1), holdPlan{}, nil)
	if from, _, _ := l.waitRoom(t.Context(), parts); from != nil {
		t.Fatalf("one of partition 1's two set aside: waitRoom = %v, want all partitions", from)
	}
	l.admit(keyedIn("a", 2, 1), holdPlan{}, nil)
	from, wake, ok := l.waitRoom(t.Context(), parts)
	if !ok || fmt.Sprint(from) != "[0 2]" {
		t.Fatalf("partition 1's backlog full: waitRoom = %v, %v; want [0 2]", from, ok)
	}
	for _, p := range []int{0, 2} {
		l.admit(keyedIn(fmt.Sprint("k", p), 0, p), holdPlan{}, nil)
		l.admit(keyedIn(fmt.Sprint("k", p), 1, p), holdPlan{}, nil)
		l.admit(keyedIn(fmt.Sprint("k", p), 2, p), holdPlan{}, nil)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if from, _, ok := l.waitRoom(ctx, parts); ok {
		t.Fatalf("every partition's backlog full: waitRoom = %v, want to wait", from)
	}
	select {
	case <-wake:
		t.Fatal("wake closed before a partition held back had room")
	default:
	}
	if _, ok := l.release("a"); !ok {
		t.Fatal("release(a) handed out nothing")
	}
	select {
	case <-wake:
	default:
		t.Fatal("wake not closed once partition 1, held back, had room again")
	}
	if from, _, ok := l.waitRoom(t.Context(), parts); !ok || fmt.Sprint(from) != "[1]" {
		t.Fatalf("one of partition 1's taken: waitRoom = %v, %v; want [1]", from, ok)
	}
}

// heapAfterGC returns the bytes in use on the heap after a collection.
func heapAfterGC() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// millionThrough passes n deliveries, key(i) each, through a limiter of
// limit 1 as eight workers would (eight in flight, a second delivery of
// every fourth key set aside behind the first), and returns the bytes
// the limiter still holds after they all ended, and the most it held.
func millionThrough(n int, key func(i int) string) (retained, peak uint64) {
	l := newKeyLimiter(1, KeyLimitBacklog(8, 8))
	l.waitSlot("waiting") // another key's message: the limit applies
	base := heapAfterGC()
	var window []string
	for i := range n {
		k := key(i)
		del := &transport.Delivery{Message: &transport.Message{PartitionKey: k}}
		if ok, _ := l.admit(del, holdPlan{}, nil); ok {
			window = append(window, k)
		}
		if k != "" && i%4 == 0 {
			l.admit(&transport.Delivery{Message: &transport.Message{PartitionKey: k}}, holdPlan{}, nil) // set aside
		}
		if len(window) == 8 {
			for _, k := range window {
				for {
					if _, more := l.release(k); !more {
						break
					}
				}
			}
			window = window[:0]
		}
		if i == n/2 {
			peak = heapAfterGC() - min(base, heapAfterGC())
		}
	}
	for _, k := range window {
		for {
			if _, more := l.release(k); !more {
				break
			}
		}
	}
	runtime.KeepAlive(l)
	after := heapAfterGC()
	if after < base {
		return 0, peak
	}
	return after - base, peak
}

// A million distinct keys cost the key limiter no more memory than a
// million messages without keys: it keeps state only for keys in flight
// or set aside, and forgets a key when its last step ends. (The
// transport keeps none per key: the key is a header and a hash.)
func TestMillionKeysBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("a million deliveries")
	}
	const n = 1_000_000
	noKeys, noKeysPeak := millionThrough(n, func(int) string { return "" })
	keys, keysPeak := millionThrough(n, func(i int) string { return "tenant-" + strconv.Itoa(i) })
	t.Logf("%d deliveries through the key limiter: without keys %d B held after, %d B at half-way; %d distinct keys %d B after, %d B at half-way",
		n, noKeys, noKeysPeak, n, keys, keysPeak)
	if keys > noKeys+64<<10 || keysPeak > noKeysPeak+64<<10 {
		t.Errorf("a million distinct keys hold %d B (%d B at half-way), more than 64 KiB above the %d B (%d B) without keys", keys, keysPeak, noKeys, noKeysPeak)
	}
}
