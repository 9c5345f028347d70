package cluster_test

// Fault scenarios on a 3-node JetStream cluster, every stream replicated
// three times (R3). Each node is a child process of this test binary (see
// TestMain), so a node can be SIGKILLed.
//
// The default run (make test) runs one pass of each scenario;
// -jetsaga.soak (or JETSAGA_SOAK=1) runs the soak: the scenarios repeated
// with larger workloads, and says so in the log.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

var soak = flag.Bool("jetsaga.soak", os.Getenv("JETSAGA_SOAK") != "", "run the cluster soak (also JETSAGA_SOAK=1)")

// startCluster starts a 3-node cluster for one test.
func startCluster(t *testing.T) *embedded.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, err := embedded.StartCluster(ctx, embedded.ClusterOptions{})
	if err != nil {
		t.Fatalf("start a 3-node cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Logf("close cluster: %v", err)
		}
	})
	return c
}

// clusterBroker connects to every node (reconnecting forever) and makes a
// broker whose streams are all R3.
func clusterBroker(t *testing.T, c *embedded.Cluster, opts ...nats.Option) (*transport.Broker, *nats.Conn) {
	t.Helper()
	nc, err := c.Connect(append([]nats.Option{embedded.ForceReplicas(3), nats.RetryOnFailedConnect(true)}, opts...)...)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	b, err := transport.NewJetStream(nc, transport.WithAPITimeout(10*time.Second))
	if err != nil {
		t.Fatalf("NewJetStream: %v", err)
	}
	t.Cleanup(func() {
		b.Close()
		nc.Close()
	})
	return b, nc
}

// workload is what a fault scenario does to a queue while a fault
// strikes: immediate sends and schedules with MessageIDs from a writer
// that retries every failed write with the same ID (so a write whose
// acknowledgment was lost comes back Duplicate), and a receiver that
// completes what it gets.
type workload struct {
	t      *testing.T
	q      *transport.Queue
	sends  int
	scheds int

	mu        sync.Mutex
	ids       []string             // in the order written
	due       map[string]time.Time // scheduled ID → due time
	written   map[string]bool      // ID → stored (Send/Schedule returned nil)
	dupAcks   int                  // writes retried after an error that came back Duplicate
	writeErrs int
	// what the receiver saw
	byID       map[string][]uint64  // ID → active seqs it was delivered under
	enq        map[string]time.Time // ID → EnqueuedAt
	deliveries int
	redeliv    int
	early      []string
	late       time.Duration
	settleErrs int
	recvErrs   int
}

func newWorkload(t *testing.T, q *transport.Queue, sends, scheds int) *workload {
	return &workload{t: t, q: q, sends: sends, scheds: scheds,
		due: map[string]time.Time{}, written: map[string]bool{}, byID: map[string][]uint64{}, enq: map[string]time.Time{}}
}

// write sends (or schedules, if at is set) one message, retrying until it
// is stored or ctx ends.
func (w *workload) write(ctx context.Context, id string, at time.Time) {
	m := &transport.Message{Body: []byte(id), MessageID: id}
	for attempt := 0; ; attempt++ {
		var err error
		var dup bool
		if at.IsZero() {
			var r transport.SendResult
			r, err = w.q.Send(ctx, m)
			dup = r.Duplicate
		} else {
			var r transport.SendResult
			sm := *m
			sm.ScheduledAt = at
			r, err = w.q.Send(ctx, &sm)
			dup = r.Duplicate
		}
		w.mu.Lock()
		if err == nil {
			w.written[id] = true
			if dup {
				if attempt == 0 {
					w.t.Errorf("first write of %s: Duplicate true, want false", id)
				}
				w.dupAcks++
			}
		} else {
			w.writeErrs++
		}
		w.mu.Unlock()
		if err == nil || ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// writer writes the workload, spread over spread: sends and schedules
// interleaved, schedules due 1-4s after they are written.
func (w *workload) writer(ctx context.Context, spread time.Duration) {
	n := w.sends + w.scheds
	start := time.Now()
	sends, scheds := 0, 0
	for i := range n {
		if scheds < w.scheds && (i%2 == 1 || sends == w.sends) {
			scheds++
			id := fmt.Sprintf("sched-%04d", i)
			at := time.Now().Add(time.Second + time.Duration(i%31)*100*time.Millisecond)
			w.mu.Lock()
			w.ids = append(w.ids, id)
			w.due[id] = at
			w.mu.Unlock()
			w.write(ctx, id, at)
		} else {
			sends++
			id := fmt.Sprintf("send-%04d", i)
			w.mu.Lock()
			w.ids = append(w.ids, id)
			w.mu.Unlock()
			w.write(ctx, id, time.Time{})
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(start.Add(spread * time.Duration(i+1) / time.Duration(n)))):
		}
	}
}

// receiver receives and completes until ctx ends.
func (w *workload) receiver(ctx context.Context) {
	for ctx.Err() == nil {
		ds, err := w.q.Receive(ctx, 20)
		now := time.Now()
		if err != nil {
			w.mu.Lock()
			w.recvErrs++
			w.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		for _, d := range ds {
			w.mu.Lock()
			w.deliveries++
			if d.DeliveryCount > 1 {
				w.redeliv++
			}
			id := d.MessageID
			w.enq[id] = d.EnqueuedAt
			if !slices.Contains(w.byID[id], d.Seq) {
				w.byID[id] = append(w.byID[id], d.Seq)
			}
			if due, ok := w.due[id]; ok {
				if d.EnqueuedAt.Before(due) || now.Before(due) {
					w.early = append(w.early, fmt.Sprintf("%s due %v: enqueued %v, received %v",
						id, due.Format(time.StampMilli), d.EnqueuedAt.Local().Format(time.StampMilli), now.Format(time.StampMilli)))
				}
				w.late = max(w.late, d.EnqueuedAt.Sub(due))
			}
			w.mu.Unlock()
			if err := d.Complete(ctx); err != nil {
				w.mu.Lock()
				w.settleErrs++
				w.mu.Unlock()
			}
		}
	}
}

// done reports, while the receiver runs, whether every written message
// was received.
func (w *workload) done() (missing int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id := range w.written {
		if len(w.byID[id]) == 0 {
			missing++
		}
	}
	return missing
}

// check verifies the outcome once the receiver has stopped.
func (w *workload) check(what string) {
	t := w.t
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	var seqs []uint64
	lost, twice := 0, 0
	if len(w.ids) != w.sends+w.scheds {
		t.Errorf("%s: %d of %d messages written", what, len(w.ids), w.sends+w.scheds)
	}
	for _, id := range w.ids {
		if !w.written[id] {
			t.Errorf("%s: %s never stored: the writer gave up", what, id)
			continue
		}
		got := w.byID[id]
		switch {
		case len(got) == 0:
			if lost++; lost <= 10 {
				t.Errorf("%s: %s stored but never delivered", what, id)
			}
		case len(got) > 1:
			if twice++; twice <= 10 {
				t.Errorf("%s: %s stored more than once: delivered under seqs %v", what, id, got)
			}
		}
		seqs = append(seqs, got...)
	}
	for id := range w.byID {
		if !w.written[id] {
			t.Errorf("%s: received %q, which was never written", what, id)
		}
	}
	slices.Sort(seqs)
	gaps := 0
	for i, s := range seqs {
		if s != uint64(i+1) {
			gaps++
			if gaps <= 5 {
				t.Errorf("%s: active seqs not gap-free: position %d holds %d (seqs %v...)", what, i+1, s, seqs[max(0, i-3):min(len(seqs), i+3)])
			}
		}
	}
	for _, e := range w.early[:min(len(w.early), 10)] {
		t.Errorf("%s: activated early: %s", what, e)
	}
	t.Logf("%s: %d of %d sends and schedules stored (%d write errors retried, %d retries found Duplicate); "+
		"%d deliveries (%d redeliveries), %d distinct messages, seqs 1..%d gap-free: %t; lost %d, stored twice %d, early %d; "+
		"latest activation %v after due; %d receive errors, %d settle errors",
		what, len(w.written), w.sends+w.scheds, w.writeErrs, w.dupAcks, w.deliveries, w.redeliv, len(seqs), len(seqs), gaps == 0,
		lost, twice, len(w.early), w.late.Round(time.Millisecond), w.recvErrs, w.settleErrs)
}

// runScenario opens an R3 queue, runs the workload over spread, calls
// fault once half of it is written, and checks that every message arrives,
// once, under gap-free seqs, no scheduled one early. It returns the queue
// and the IDs written, for duplicate checks.
func runScenario(t *testing.T, c *embedded.Cluster, name string, sends, scheds int, spread time.Duration,
	fault func(ctx context.Context, q *transport.Queue)) (*transport.Queue, []string) {
	t.Helper()
	b, _ := clusterBroker(t, c)
	ctx := t.Context()
	if err := b.DeleteQueue(ctx, name); err != nil {
		t.Fatal(err)
	}
	q, err := b.OpenQueue(ctx, transport.QueueConfig{Name: name, Replicas: 3, LockDuration: 2 * time.Second, DuplicateWindow: time.Hour})
	if err != nil {
		t.Fatalf("OpenQueue: %v", err)
	}
	w := newWorkload(t, q, sends, scheds)
	// The writer retries each write until it is stored; only the test's
	// own deadline stops it.
	wctx := ctx
	rctx, stopReceiver := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { w.receiver(rctx) })
	var writing sync.WaitGroup
	writing.Go(func() { w.writer(wctx, spread) })
	half := time.Now().Add(spread / 2)
	select {
	case <-time.After(time.Until(half)):
	case <-ctx.Done():
	}
	began := time.Now()
	fault(ctx, q)
	t.Logf("%s: fault took %v", name, time.Since(began).Round(time.Millisecond))
	writing.Wait()
	t.Logf("%s: workload written in %v", name, time.Since(began).Round(time.Millisecond))
	// nats-server re-creates a queue stream's sourcing after a failure with
	// a backoff of up to 2 minutes: wait that long for stragglers.
	deadline := time.Now().Add(3 * time.Minute)
	for w.done() > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond) // polling the receiver's progress
	}
	// Let redeliveries of anything in flight show up, then stop.
	quiet := time.Now().Add(3 * time.Second)
	for time.Now().Before(quiet) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	stopReceiver()
	wg.Wait()
	w.check(name)
	splitLateness(t, c, q, w)
	var ids []string
	for id := range w.written {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return q, ids
}

// splitLateness reports where the latest scheduled message lost its
// time: in nats-server's scheduler (its copy stored in the schedule
// stream after its due time) or in sourcing (the copy reaching the queue
// stream after it was stored).
func splitLateness(t *testing.T, c *embedded.Cluster, q *transport.Queue, w *workload) {
	t.Helper()
	nc, err := c.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	oc, err := js.OrderedConsumer(ctx, scheduleStream(q), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"JETSAGA.S." + q.Name() + ".0.*.f.>"}})
	if err != nil {
		t.Fatalf("read schedule stream: %v", err)
	}
	stored := map[string]time.Time{}
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(stored) < len(w.ids) {
		m, err := oc.Next(jetstream.FetchMaxWait(2 * time.Second))
		if err != nil {
			break
		}
		md, _ := m.Metadata()
		stored[m.Headers().Get("Jetsaga-Message-Id")] = md.Timestamp
	}
	var sched, source time.Duration
	var schedID, sourceID string
	for id, due := range w.due {
		at, ok := stored[id]
		if !ok {
			continue
		}
		if d := at.Sub(due); d > sched {
			sched, schedID = d, id
		}
		if d := w.enq[id].Sub(at); d > source {
			source, sourceID = d, id
		}
	}
	t.Logf("%s: of %d copies in the schedule stream, latest activation by the scheduler %v after due (%s); "+
		"longest sourcing into the queue stream %v (%s)", q.Name(), len(stored), sched.Round(time.Millisecond), schedID, source.Round(time.Millisecond), sourceID)
}

// checkDuplicates writes every ID again, as a send and as a schedule: each
// must come back Duplicate, and nothing new may be delivered.
func checkDuplicates(t *testing.T, q *transport.Queue, ids []string, when string) {
	t.Helper()
	ctx := t.Context()
	dups := 0
	for _, id := range ids {
		for _, at := range []time.Time{{}, time.Now()} {
			m := &transport.Message{Body: []byte("again " + id), MessageID: id, ScheduledAt: at}
			var r transport.SendResult
			var err error
			for range 50 { // a write may fail while a leader is elected
				if r, err = q.Send(ctx, m); err == nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("%s: write %s again: %v", when, id, err)
			}
			if !r.Duplicate {
				t.Errorf("%s: %s written again (scheduled %t): Duplicate false, want true", when, id, !at.IsZero())
				continue
			}
			dups++
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if ds, err := q.Receive(rctx, 100); err == nil {
		for _, d := range ds {
			t.Errorf("%s: delivered %q (seq %d) after every ID was refused as a duplicate", when, d.Body, d.Seq)
		}
	}
	t.Logf("%s: %d of %d writes of %d IDs refused as duplicates", when, dups, 2*len(ids), len(ids))
}

// scheduleStream and queueStream name the streams of partition 0 of a
// queue under the default prefix.
func scheduleStream(q *transport.Queue) string { return "JETSAGA_S_" + q.Name() + "_0" }
func queueStream(q *transport.Queue) string    { return "JETSAGA_Q_" + q.Name() + "_0" }

// colocate tries to make the leader of the queue stream the leader of the
// schedule stream too (stepping it down a few times), and returns the
// schedule stream's leader.
func colocate(ctx context.Context, t *testing.T, c *embedded.Cluster, q *transport.Queue) int {
	t.Helper()
	lead, err := c.LeaderOf(ctx, scheduleStream(q))
	if err != nil {
		t.Fatal(err)
	}
	for range 6 {
		ql, err := c.LeaderOf(ctx, queueStream(q))
		if err != nil {
			t.Fatal(err)
		}
		if ql == lead {
			break
		}
		if _, err := c.StepDown(ctx, queueStream(q)); err != nil {
			t.Fatal(err)
		}
	}
	return lead
}

type scale struct {
	sends, scheds int
	spread        time.Duration
	rounds        int
}

func scenarioScale(t *testing.T) scale {
	if *soak {
		t.Log("soak: -jetsaga.soak/JETSAGA_SOAK set: larger workloads, repeated")
		return scale{sends: 1000, scheds: 1000, spread: 20 * time.Second, rounds: 3}
	}
	t.Log("quick form (the soak, with larger repeated workloads, runs with -jetsaga.soak or JETSAGA_SOAK=1)")
	return scale{sends: 150, scheds: 150, spread: 6 * time.Second, rounds: 1}
}

// TestClusterLeaderKilled: the node leading a queue's schedule stream (and
// if it can be arranged its queue stream) is SIGKILLed with timeouts
// pending and messages in flight, stays down while schedules come due,
// and is restarted. Nothing is lost or stored twice, seqs stay gap-free,
// overdue timeouts fire, none early; every ID stays a duplicate.
func TestClusterLeaderKilled(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	sc := scenarioScale(t)
	for round := range sc.rounds {
		name := fmt.Sprintf("killed-%d", round)
		q, ids := runScenario(t, c, name, sc.sends, sc.scheds, sc.spread, func(ctx context.Context, q *transport.Queue) {
			lead := colocate(ctx, t, c, q)
			ql, _ := c.LeaderOf(ctx, queueStream(q))
			if err := c.Kill(lead); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			next, err := c.LeaderOf(ctx, scheduleStream(q))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: killed %s (SIGKILL), leader of the schedule stream (queue stream led by %s); new leader %s after %v",
				name, c.Name(lead), c.Name(ql), c.Name(next), time.Since(killed).Round(time.Millisecond))
			if err := c.Restart(lead); err != nil {
				t.Fatal(err)
			}
			if err := c.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %s restarted and current %v after the kill", name, c.Name(lead), time.Since(killed).Round(time.Millisecond))
		})
		checkDuplicates(t, q, ids, name+" after the kill")
	}
}

// TestClusterStepDowns: the leaders of the schedule stream and of the
// queue stream step down mid-workload, one after the other.
func TestClusterStepDowns(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	sc := scenarioScale(t)
	for round := range sc.rounds {
		name := fmt.Sprintf("stepdown-%d", round)
		q, ids := runScenario(t, c, name, sc.sends, sc.scheds, sc.spread, func(ctx context.Context, q *transport.Queue) {
			for _, s := range []string{scheduleStream(q), queueStream(q), scheduleStream(q)} {
				old, err := c.LeaderOf(ctx, s)
				if err != nil {
					t.Fatal(err)
				}
				next, err := c.StepDown(ctx, s)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s: %s stepped down: %s -> %s", name, s, c.Name(old), c.Name(next))
			}
		})
		checkDuplicates(t, q, ids, name+" after the stepdowns")
	}
}

// TestClusterDuplicatesAcrossLeaderChange: MessageIDs of every fate
// (completed, dead-lettered, fired, pending, cancelled, redelivered) written
// before a leader change are refused after it, as sends and as schedules:
// after a stepdown of the schedule stream, and after its leader is
// killed.
func TestClusterDuplicatesAcrossLeaderChange(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	b, _ := clusterBroker(t, c)
	for _, abrupt := range []bool{false, true} {
		name := fmt.Sprintf("dups-abrupt-%t", abrupt)
		ctx := t.Context()
		if err := b.DeleteQueue(ctx, name); err != nil {
			t.Fatal(err)
		}
		q, err := b.OpenQueue(ctx, transport.QueueConfig{Name: name, Replicas: 3, DuplicateWindow: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ids := seedFates(t, q)
		lead, err := c.LeaderOf(ctx, scheduleStream(q))
		if err != nil {
			t.Fatal(err)
		}
		if abrupt {
			if err := c.Kill(lead); err != nil {
				t.Fatal(err)
			}
			next, err := c.LeaderOf(ctx, scheduleStream(q))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: killed %s, leader of %s; new leader %s", name, c.Name(lead), scheduleStream(q), c.Name(next))
			checkDuplicates(t, q, ids, name+" with the old leader down")
			if err := c.Restart(lead); err != nil {
				t.Fatal(err)
			}
			if err := c.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			// Make the restarted node lead again: it must remember too.
			for range 6 {
				if l, _ := c.LeaderOf(ctx, scheduleStream(q)); l == lead {
					break
				}
				if _, err := c.StepDown(ctx, scheduleStream(q)); err != nil {
					t.Fatal(err)
				}
			}
			l, _ := c.LeaderOf(ctx, scheduleStream(q))
			checkDuplicates(t, q, ids, fmt.Sprintf("%s after the restart, leader %s", name, c.Name(l)))
			continue
		}
		next, err := c.StepDown(ctx, scheduleStream(q))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %s stepped down: %s -> %s", name, scheduleStream(q), c.Name(lead), c.Name(next))
		checkDuplicates(t, q, ids, name+" after the stepdown")
	}
}

// seedFates writes one MessageID per fate and returns them: completed,
// dead-lettered, waiting in the queue, fired (scheduled, activated,
// completed), pending, cancelled, completed after a redelivery.
func seedFates(t *testing.T, q *transport.Queue) []string {
	t.Helper()
	ctx := t.Context()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	send := func(id string) {
		t.Helper()
		_, err := q.Send(ctx, &transport.Message{Body: []byte(id), MessageID: id})
		must(err)
	}
	receive := func(want string) *transport.Delivery {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		ds, err := q.Receive(rctx, 1)
		must(err)
		if string(ds[0].Body) != want {
			t.Fatalf("received %q, want %q", ds[0].Body, want)
		}
		return ds[0]
	}
	send("fate-completed")
	must(receive("fate-completed").Complete(ctx))
	send("fate-dead")
	must(receive("fate-dead").DeadLetter(ctx, "Test", "seeding a dead letter"))
	_, err := q.Schedule(ctx, &transport.Message{Body: []byte("fate-fired"), MessageID: "fate-fired"}, time.Now().Add(100*time.Millisecond))
	must(err)
	must(receive("fate-fired").Complete(ctx))
	_, err = q.Schedule(ctx, &transport.Message{Body: []byte("fate-pending"), MessageID: "fate-pending"}, time.Now().Add(time.Hour))
	must(err)
	seq, err := q.Schedule(ctx, &transport.Message{Body: []byte("fate-cancelled"), MessageID: "fate-cancelled"}, time.Now().Add(time.Hour))
	must(err)
	must(q.Cancel(ctx, seq))
	send("fate-redelivered")
	must(receive("fate-redelivered").Abandon(ctx))
	must(receive("fate-redelivered").Complete(ctx))
	return []string{"fate-completed", "fate-dead", "fate-fired", "fate-pending", "fate-cancelled", "fate-redelivered"}
}
