package temporal

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/timeout/temporal/temporaltest"
	"github.com/jetsaga/jetsaga/transport"
)

// TestServerKilledAndRestarted kills (SIGKILL) a file-backed Temporal
// server with timeouts pending, keeps it down past the due time of half
// of them, and starts it again on the same file: every timeout fires
// exactly once, none before its due time; a timeout cancelled before the
// kill stays cancelled, and one still pending can be cancelled after the
// restart. The worker and the engine keep their client across the
// restart.
func TestServerKilledAndRestarted(t *testing.T) {
	t.Parallel() // waits on real time: overlaps the package's other long waits
	_, ns := servers(t)
	srv := temporaltest.New(t, temporaltest.Options{DBFile: temporaltest.TempDB(t), SQLitePragmas: []string{"journal_mode=wal", "synchronous=normal"}})
	c := srv.Client(t)
	b := broker(t, ns)
	tq := newTaskQueue()
	q, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: "restart-" + tq})
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, c, b, WithTaskQueue(tq))
	e, err := New(c, WithTaskQueue(tq))
	if err != nil {
		t.Fatal(err)
	}
	schedule := func(id string, at time.Time) timeout.Ref {
		t.Helper()
		ref, err := e.Schedule(t.Context(), timeout.Timeout{ID: id, Queue: q.Name(), At: at, Message: &transport.Message{Body: []byte(id)}})
		if err != nil {
			t.Errorf("Schedule(%s): %v", id, err) // Errorf: called from goroutines too
		}
		return ref
	}

	// The cancels first: each waits for the worker, which a loaded machine
	// makes slow, and the overdue timeouts' due times start from t0, once
	// they are done.
	gone := schedule("cancelled-before", time.Now().Add(time.Hour))
	if err := e.Cancel(t.Context(), gone); err != nil {
		t.Fatalf("Cancel before the kill: %v", err)
	}
	pending := schedule("cancelled-after", time.Now().Add(time.Hour))

	t0 := time.Now()
	due := map[string]time.Time{}
	for i := range 10 {
		due[fmt.Sprintf("overdue-%d", i)] = t0.Add(6*time.Second + time.Duration(i)*100*time.Millisecond) // while the server is down
		due[fmt.Sprintf("later-%d", i)] = t0.Add(14*time.Second + time.Duration(i)*100*time.Millisecond)  // after the restart
	}
	var wg sync.WaitGroup
	for id, at := range due {
		wg.Go(func() { schedule(id, at) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// The test's premise, not a latency limit on the engine: the server
	// goes down before the first overdue timeout is due.
	if late := time.Since(t0.Add(6 * time.Second)); late > -500*time.Millisecond {
		t.Fatalf("scheduling took %v: the overdue timeouts are not overdue by the kill", time.Since(t0))
	}

	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if d := receive(t, q, time.Until(t0.Add(8*time.Second))); d != nil {
		t.Fatalf("%q fired with the server down", d.Body)
	}
	if err := srv.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Logf("server down for %v, restarted %v after t0", time.Since(killed).Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))

	got := map[string]int{}
	deadline := t0.Add(60 * time.Second)
	for len(got) < len(due) && time.Now().Before(deadline) {
		d := receive(t, q, time.Until(deadline))
		if d == nil {
			break
		}
		id, now := string(d.Body), time.Now()
		got[id]++
		at, ok := due[id]
		switch {
		case !ok:
			t.Errorf("%q fired: it was cancelled", id)
		case now.Before(at) || d.EnqueuedAt.Before(at):
			t.Errorf("%q fired %v early", id, at.Sub(d.EnqueuedAt))
		}
	}
	if d := receive(t, q, 2*time.Second); d != nil {
		got[string(d.Body)]++
	}
	for id := range due {
		if got[id] != 1 {
			t.Errorf("%s fired %d times, want once", id, got[id])
		}
	}
	if err := e.Cancel(t.Context(), gone); !errors.Is(err, timeout.ErrNotFound) {
		t.Errorf("Cancel of the timeout cancelled before the kill: %v, want ErrNotFound", err)
	}
	if err := e.Cancel(t.Context(), pending); err != nil {
		t.Errorf("Cancel after the restart: %v, want nil", err)
	}
	if err := e.Cancel(t.Context(), e.ref(workflowID(e.Name(), q.Name(), "later-0"))); !errors.Is(err, timeout.ErrAlreadyFired) {
		t.Errorf("Cancel of a fired timeout after the restart: %v, want ErrAlreadyFired", err)
	}
}
