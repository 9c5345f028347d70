package transport_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// housekeepingRequests opens queue from brokers brokers, each on a
// connection of its own, and counts the JetStream API requests on the
// queue's streams that the server sees over cycles cycles of the
// partition's housekeeper (signalled by the housekeeping loop), after
// every broker has opened the queue and had one cycle to try the lease.
func housekeepingRequests(t *testing.T, srv *embedded.Server, queue string, brokers, cycles int) int64 {
	t.Helper()
	counter, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer counter.Close()
	var counting atomic.Bool
	var requests atomic.Int64
	if _, err := counter.Subscribe("$JS.API.>", func(m *nats.Msg) {
		if counting.Load() && strings.Contains(m.Subject, "_"+queue) {
			requests.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := counter.Flush(); err != nil {
		t.Fatal(err)
	}
	var ready atomic.Bool
	var held atomic.Int64
	var holder atomic.Pointer[string] // the first broker seen holding
	done := make(chan struct{})
	undo := transport.SetHousekeepCycled(func(broker, q string, part int, isHolder bool) {
		if q != queue || !isHolder || !ready.Load() {
			return
		}
		if holder.CompareAndSwap(nil, &broker); *holder.Load() != broker {
			return
		}
		switch held.Add(1) {
		case 2: // every broker has had a cycle since it opened the queue
			counting.Store(true)
		case int64(2 + cycles):
			counting.Store(false)
			close(done)
		}
	})
	defer undo()
	for i := range brokers {
		nc, err := srv.Connect()
		if err != nil {
			t.Fatal(err)
		}
		b, err := transport.NewJetStream(nc)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		defer b.Close()
		if _, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: queue, MaxDeliveryCount: 3}); err != nil {
			t.Fatalf("broker %d: %v", i, err)
		}
	}
	ready.Store(true)
	select {
	case <-done:
	case <-time.After(time.Duration(cycles)*time.Second + 30*time.Second):
		t.Fatalf("%d housekeeper cycles of %d, want %d", held.Load(), 2+cycles, 2+cycles)
	}
	if err := counter.Flush(); err != nil {
		t.Fatal(err)
	}
	return requests.Load()
}

// TestHousekeepingOneHolderAmongMany: twenty brokers, each on a
// connection of its own as twenty processes would be, that hold one queue
// open make one broker's worth of housekeeping requests: one of them
// holds the partition's lease and housekeeps, the others only listen.
func TestHousekeepingOneHolderAmongMany(t *testing.T) {
	srv, _, _ := startServer(t, embedded.Options{})
	const cycles = 10
	one := housekeepingRequests(t, srv, "hkone", 1, cycles)
	twenty := housekeepingRequests(t, srv, "hktwenty", 20, cycles)
	t.Logf("housekeeping requests over %d cycles: %d with 1 broker, %d with 20", cycles, one, twenty)
	if one == 0 {
		t.Fatalf("1 broker: no housekeeping requests over %d cycles", cycles)
	}
	if twenty > 2*one+2 {
		t.Errorf("20 brokers: %d housekeeping requests over %d cycles, want about 1 broker's %d", twenty, cycles, one)
	}
}

// TestHousekeepingHandedOverOnClose: a broker that closes hands its
// leases over at once: another broker that has the queue open holds the
// lease from its next cycle or so, not when the lease would lapse.
func TestHousekeepingHandedOverOnClose(t *testing.T) {
	srv, _, a := startServer(t, embedded.Options{})
	var first sync.Once
	aHolds := make(chan struct{})
	var closed atomic.Bool
	var after atomic.Int64 // cycles reported after the holder closed, before a holder
	bHolds := make(chan int64, 1)
	undo := transport.SetHousekeepCycled(func(_, q string, part int, held bool) {
		if q != "handover" {
			return
		}
		switch {
		case !closed.Load() && held:
			first.Do(func() { close(aHolds) })
		case closed.Load() && held:
			select {
			case bHolds <- after.Load():
			default:
			}
		case closed.Load():
			after.Add(1)
		}
	})
	defer undo()
	cfg := transport.QueueConfig{Name: "handover"}
	if _, err := a.OpenQueue(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	select {
	case <-aHolds:
	case <-time.After(10 * time.Second):
		t.Fatal("the only broker with the queue open does not hold its lease")
	}
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b, err := transport.NewJetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if _, err := b.Queue(t.Context(), "handover"); err != nil {
		t.Fatal(err)
	}
	closed.Store(true)
	a.Close()
	select {
	case n := <-bHolds:
		// The cycle that heard the hand-over, and one more for the
		// advisory in flight (and the closed broker's last).
		if n > 3 {
			t.Errorf("the other broker held the lease after %d cycles without, want at most 3", n)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the lease of the closed broker never reached the other")
	}
}

// TestHousekeepLeaseHolder is the process TestExhaustedMovedAfterHolderKilled
// kills: it opens queue killed, sends a poison message, and says when it
// holds the partition's lease.
func TestHousekeepLeaseHolder(t *testing.T) {
	url := os.Getenv("JETSAGA_HOUSEKEEP_HOLDER")
	if url == "" {
		t.Skip("run by TestExhaustedMovedAfterHolderKilled")
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	b, err := transport.NewJetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	holds := make(chan struct{})
	var once sync.Once
	transport.SetHousekeepCycled(func(_, q string, part int, held bool) {
		if q == "killed" && held {
			once.Do(func() { close(holds) })
		}
	})
	q, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: "killed", MaxDeliveryCount: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Send(t.Context(), &transport.Message{Body: []byte("poison")}); err != nil {
		t.Fatal(err)
	}
	<-holds
	fmt.Println("holding")
	time.Sleep(time.Minute) // killed long before
	t.Fatal("not killed")
}

// exhaustedAfterHolderDies is how soon after the death of a partition's
// housekeeper a message that exhausted its deliveries unheard reaches the
// dead-letter queue, at the latest (docs/operating.md).
const exhaustedAfterHolderDies = 20 * time.Second

// TestExhaustedMovedAfterHolderKilled: the process that holds a
// partition's lease is killed (SIGKILL); a message then exhausts its
// deliveries while no broker hears the advisory; a broker that opens the
// queue takes the lease when it lapses and moves the message within the
// documented time of the kill.
func TestExhaustedMovedAfterHolderKilled(t *testing.T) {
	srv, nc, b := startServer(t, embedded.Options{})
	cmd := exec.Command(os.Args[0], "-test.run=^TestHousekeepLeaseHolder$", "-test.count=1")
	cmd.Env = append(os.Environ(), "JETSAGA_HOUSEKEEP_HOLDER="+srv.ClientURL())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	holding := make(chan bool, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if s.Text() == "holding" {
				holding <- true
				return
			}
		}
		holding <- false
	}()
	select {
	case ok := <-holding:
		if !ok {
			t.Fatal("the holder process ended without holding the lease")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the holder process does not hold the lease")
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	killed := time.Now()
	_ = cmd.Wait()

	js, _ := jetstream.New(nc)
	foreignNak(t, js, "killed", 2)
	q, err := b.Queue(t.Context(), "killed")
	if err != nil {
		t.Fatal(err)
	}
	awaitExhaustedMoved(t, q, exhaustedAfterHolderDies-time.Since(killed))
	t.Logf("moved to the dead-letter queue %v after the holder was killed", time.Since(killed).Round(100*time.Millisecond))
}

// TestHousekeepingWhereLeaseRefused: on a schedule stream that refuses
// the lease consumer (here: a consumer limit, reached), a broker
// housekeeps the partition regardless, as every broker did before the
// lease.
func TestHousekeepingWhereLeaseRefused(t *testing.T) {
	srv, nc, a := startServer(t, embedded.Options{})
	if _, err := a.OpenQueue(t.Context(), transport.QueueConfig{Name: "limited"}); err != nil {
		t.Fatal(err)
	}
	a.Close()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(t.Context(), "JETSAGA_S_limited_0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateConsumer(t.Context(), jetstream.ConsumerConfig{Durable: "other"}); err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	cfg.MaxConsumers = info.State.Consumers
	if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	holds := make(chan struct{})
	var once sync.Once
	undo := transport.SetHousekeepCycled(func(_, q string, part int, held bool) {
		if q == "limited" && held {
			once.Do(func() { close(holds) })
		}
	})
	defer undo()
	nc2, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc2.Close)
	b, err := transport.NewJetStream(nc2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if _, err := b.Queue(t.Context(), "limited"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-holds:
	case <-time.After(10 * time.Second):
		t.Fatal("no broker housekeeps a partition whose schedule stream refuses the lease")
	}
}
