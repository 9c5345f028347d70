package transport_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// These tests cover what only the JetStream broker has: its streams, the
// server's limits and its connection. The shared contract is in
// transporttest.

func startServer(t *testing.T, opts embedded.Options) (*embedded.Server, *nats.Conn, *transport.Broker) {
	t.Helper()
	srv, err := embedded.Start(opts)
	if err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	b, err := transport.NewJetStream(nc)
	if err != nil {
		t.Fatalf("NewJetStream: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return srv, nc, b
}

func TestOpenQueueIsIdempotent(t *testing.T) {
	_, nc, b := startServer(t, embedded.Options{})
	cfg := transport.QueueConfig{Name: "idem", Partitions: 2, LockDuration: 7 * time.Second}
	for i := range 3 {
		if _, err := b.OpenQueue(t.Context(), cfg); err != nil {
			t.Fatalf("OpenQueue #%d: %v", i+1, err)
		}
	}
	js, _ := jetstream.New(nc)
	var names []string
	for n := range js.StreamNames(t.Context()).Name() {
		names = append(names, n)
	}
	// Two partitions of two streams each, plus the dead-letter stream.
	if len(names) != 5 {
		t.Errorf("streams after opening the same queue 3 times: %v, want 5", names)
	}
	c, err := js.Consumer(t.Context(), "JETSAGA_Q_idem_1", "recv")
	if err != nil {
		t.Fatalf("consumer of partition 1: %v", err)
	}
	if got, want := c.CachedInfo().Config.AckWait, 7*time.Second+1750*time.Millisecond; got != want {
		t.Errorf("consumer AckWait %v, want the LockDuration 7s plus a quarter: %v", got, want)
	}
}

// An operator who adds a limit that deletes unreceived messages to a
// queue's stream gets a clear refusal instead of silent loss.
func TestOpenQueueRefusesLossyLimits(t *testing.T) {
	_, nc, b := startServer(t, embedded.Options{})
	js, _ := jetstream.New(nc)
	for _, tc := range []struct {
		name, stream string
		change       func(*jetstream.StreamConfig)
		want         string
	}{
		{"MaxAge on schedules", "JETSAGA_S_lossy1_0", func(c *jetstream.StreamConfig) { c.MaxAge = time.Hour }, "MaxAge"},
		{"MaxMsgs on queue", "JETSAGA_Q_lossy2_0", func(c *jetstream.StreamConfig) { c.MaxMsgs = 100 }, "MaxMsgs"},
		{"MaxBytes with DiscardOld", "JETSAGA_Q_lossy3_0", func(c *jetstream.StreamConfig) {
			c.MaxBytes, c.Discard = 1<<20, jetstream.DiscardOld
		}, "DiscardOld"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			queue := strings.Split(tc.stream, "_")[2]
			if _, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: queue}); err != nil {
				t.Fatal(err)
			}
			s, err := js.Stream(t.Context(), tc.stream)
			if err != nil {
				t.Fatal(err)
			}
			cfg := s.CachedInfo().Config
			tc.change(&cfg)
			if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
				t.Fatalf("operator's update: %v", err)
			}
			_, err = b.OpenQueue(t.Context(), transport.QueueConfig{Name: queue})
			if !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("OpenQueue after %s: %v, want ErrInvalidConfig naming %s", tc.name, err, tc.want)
			}
		})
	}
}

// The size check uses the server's own max_payload, not a constant.
func TestMessageTooLargeForServer(t *testing.T) {
	_, _, b := startServer(t, embedded.Options{MaxPayload: 64 << 10})
	q, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: "small"})
	if err != nil {
		t.Fatal(err)
	}
	for _, schedule := range []bool{false, true} {
		m := &transport.Message{Body: make([]byte, 65<<10)}
		if schedule {
			m.ScheduledAt = time.Now().Add(time.Hour)
		}
		if _, err := q.Send(t.Context(), m); !errors.Is(err, transport.ErrMessageTooLarge) {
			t.Errorf("Send of 65 KiB (scheduled %v) to a 64 KiB server: %v, want ErrMessageTooLarge", schedule, err)
		}
	}
	if _, err := q.Send(t.Context(), &transport.Message{Body: make([]byte, 60<<10)}); err != nil {
		t.Fatalf("Send of 60 KiB after the refusals: %v", err)
	}
	ds, err := q.Receive(t.Context(), 10)
	if err != nil || len(ds) != 1 || ds[0].Seq != 1 {
		t.Errorf("Receive after the refusals: %d messages, %v; want the 60 KiB one, seq 1 (nothing stored before)", len(ds), err)
	}
}

func TestClosedConnection(t *testing.T) {
	_, nc, b := startServer(t, embedded.Options{})
	q, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: "closing"})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	if _, err := q.Send(t.Context(), &transport.Message{Body: []byte("x")}); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Send on a closed connection: %v, want ErrClosed", err)
	}
	if _, err := q.Schedule(t.Context(), &transport.Message{}, time.Now()); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Schedule on a closed connection: %v, want ErrClosed", err)
	}
	if _, err := q.Receive(t.Context(), 1); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Receive on a closed connection: %v, want ErrClosed", err)
	}
}

// A queue that was full and has been drained takes sends at once: the
// size Send caches between reads of the stream may let a send through,
// never refuse one. The cache is kept for an hour here, so that a refusal
// on the cached size shows whatever the machine's speed.
func TestSendAfterDrainingFullQueue(t *testing.T) {
	defer transport.SetSizeStale(time.Hour)()
	_, _, b := startServer(t, embedded.Options{})
	const max, size = 32 << 10, 4 << 10
	q, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: "drained", MaxBytes: max})
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, size)
	stored := 0
	for ; ; stored++ {
		_, err := q.Send(t.Context(), &transport.Message{Body: body})
		if errors.Is(err, transport.ErrQueueFull) {
			break
		}
		if err != nil || stored > max/size {
			t.Fatalf("Send #%d to a queue with MaxBytes %d: %v, want ErrQueueFull by message %d", stored+1, max, err, max/size+1)
		}
	}
	for got := 0; got < stored; {
		ds, err := q.Receive(t.Context(), stored-got)
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		for _, d := range ds {
			if err := d.Complete(t.Context()); err != nil {
				t.Fatalf("Complete(%#x): %v", d.Seq, err)
			}
		}
		got += len(ds)
	}
	if _, err := q.Send(t.Context(), &transport.Message{Body: body}); err != nil {
		t.Errorf("Send after draining the %d messages of a full queue: %v, want nil", stored, err)
	}
}

// TestAPITimeoutBoundsEachPartition: WithAPITimeout bounds each step of
// opening a queue, a topic or a subscription — a partition's streams and
// consumer — not the whole open, so that a queue of many partitions (or a
// busy cluster) opens with a context that has no deadline. The number of
// partitions is chosen so that the whole open takes about three times the
// timeout, from the measured cost of one partition.
func TestAPITimeoutBoundsEachPartition(t *testing.T) {
	_, nc, probe := startServer(t, embedded.Options{})
	start := time.Now()
	if _, err := probe.OpenQueue(t.Context(), transport.QueueConfig{Name: "probe", Partitions: 8}); err != nil {
		t.Fatalf("OpenQueue(8 partitions): %v", err)
	}
	each := time.Since(start) / 9 // eight partitions and the dead-letter queue
	timeout := max(time.Second, 10*each)
	parts := min(1024, int(3*timeout/each)+1)
	t.Logf("a partition takes %v to provision: API timeout %v, %d partitions", each.Round(time.Millisecond), timeout, parts)

	b, err := transport.NewJetStream(nc, transport.WithAPITimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	start = time.Now()
	if _, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: "wide", Partitions: parts}); err != nil {
		t.Fatalf("OpenQueue(%d partitions) with API timeout %v: %v", parts, timeout, err)
	}
	t.Logf("OpenQueue took %v", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	tp, err := b.OpenTopic(t.Context(), transport.TopicConfig{Name: "wide-topic", Partitions: parts})
	if err != nil {
		t.Fatalf("OpenTopic(%d partitions) with API timeout %v: %v", parts, timeout, err)
	}
	if _, err := tp.OpenSubscription(t.Context(), "sub", transport.SubscriptionConfig{}); err != nil {
		t.Fatalf("OpenSubscription on %d partitions with API timeout %v: %v", parts, timeout, err)
	}
	t.Logf("OpenTopic and OpenSubscription took %v", time.Since(start).Round(time.Millisecond))
}
