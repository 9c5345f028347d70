package saga_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

// A dispatcher publishes its sagas' catalog entries as it starts, on the
// memory broker as on JetStream (TestCatalogOnJetStream in
// saga/machine), readable with no definition: name, version, queue, the
// plain saga's Mermaid and its three-state graph.
func TestDispatcherPublishesCatalog(t *testing.T) {
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	def := counterSaga()
	d, err := saga.NewDispatcher(b, memstore.New(), "cat", saga.WithSagas(def), saga.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	testutil.RunUntilCleanup(t, d.Run)
	q, err := b.Queue(t.Context(), "cat")
	if err != nil {
		t.Fatal(err)
	}
	var e saga.CatalogEntry
	testutil.Await(t, 10*time.Second, func() string {
		e, err = saga.LoadCatalogEntry(t.Context(), q, "counter")
		if err != nil {
			return err.Error()
		}
		return ""
	})
	if e.Saga != "counter" || e.Version != 1 || e.Queue != "cat" || e.Kind != "saga" || e.Mermaid != def.Mermaid() || e.Published.IsZero() {
		t.Errorf("entry = %+v", e)
	}
	want := []saga.GraphTransition{
		{From: "Initial", To: "Running", Event: saga.MessageName[Incr]()},
		{From: "Running", To: "Completed", Event: "MarkComplete"},
	}
	if g := e.Graph; g.Initial != "Initial" || g.Final != "Completed" || len(g.States) != 3 || len(g.Transitions) != 2 ||
		g.Transitions[0] != want[0] || g.Transitions[1] != want[1] {
		t.Errorf("graph = %+v, want transitions %+v", g, want)
	}
	if _, err := saga.LoadCatalogEntry(t.Context(), q, "nosuch"); !errors.Is(err, saga.ErrNoCatalogEntry) {
		t.Errorf("LoadCatalogEntry(nosuch) = %v, want ErrNoCatalogEntry", err)
	}
	if _, err := saga.LoadCatalogEntry(t.Context(), q, "a.>"); !errors.Is(err, saga.ErrNoCatalogEntry) {
		t.Errorf("LoadCatalogEntry(a.>) = %v, want ErrNoCatalogEntry", err)
	}
}

// The rolling-deploy rules: a newer version replaces an older one, an
// older never replaces a newer one, the same version and content is not
// written again (however often dispatchers start), the same version
// with another content is (the last started wins).
func TestPublishCatalogEntryVersions(t *testing.T) {
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()
	q, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "cat"})
	if err != nil {
		t.Fatal(err)
	}
	entry := func(version int, mermaid string, at int) saga.CatalogEntry {
		return saga.CatalogEntry{Saga: "order", Version: version, Queue: "cat", Kind: "saga", Mermaid: mermaid,
			Published: time.Date(2026, 1, 1, 0, 0, at, 0, time.UTC)}
	}
	steps := []struct {
		name        string
		e           saga.CatalogEntry
		wantWritten bool
		wantStored  string
	}{
		{"first", entry(2, "v2", 1), true, "v2"},
		{"same again, later", entry(2, "v2", 2), false, "v2"},
		{"older version", entry(1, "v1", 3), false, "v2"},
		{"same version, other content", entry(2, "v2b", 4), true, "v2b"},
		{"newer version", entry(3, "v3", 5), true, "v3"},
	}
	for _, s := range steps {
		written, err := saga.PublishCatalogEntry(ctx, q, s.e)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		got, err := saga.LoadCatalogEntry(ctx, q, "order")
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if written != s.wantWritten || got.Mermaid != s.wantStored {
			t.Errorf("%s: written %v, stored %q; want %v, %q", s.name, written, got.Mermaid, s.wantWritten, s.wantStored)
		}
	}
	// The catalog shares the queue's state with saga records
	// (saga/queuestore) without taking a key a saga could have.
	for k, err := range q.StateKeys(ctx, "order.") {
		t.Errorf("a catalog key under a saga's prefix: %q (%v)", k, err)
	}
}

// Dispatchers of one version starting together on a real server write
// the entry once: of eight concurrent publishers of the same entry (each
// with its own start time), one writes, the others find it equal.
func TestPublishCatalogEntryConcurrently(t *testing.T) {
	srv := startServer(t)
	n := newNode(t, srv.ClientURL())
	q := n.openQueue(t, transport.QueueConfig{Name: "cat"})
	e := counterSaga().Describe("cat")
	var mu sync.Mutex
	written := 0
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			e := e
			e.Published = time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC)
			w, err := saga.PublishCatalogEntry(t.Context(), q, e)
			if err != nil {
				t.Error(err)
			}
			if w {
				mu.Lock()
				written++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if written != 1 {
		t.Errorf("%d publishers wrote, want 1", written)
	}
	if _, rev, err := q.LoadState(t.Context(), saga.CatalogKeyPrefix+"counter"); err != nil || rev == 0 {
		t.Errorf("LoadState: rev %d, %v", rev, err)
	}
}
