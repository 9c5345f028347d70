package saga_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// Two versions of one saga, as two releases of a service would define
// it: version 1 counts, version 2 keeps a total and how many adds it
// handled itself.

type addTo struct {
	ID string
	N  int
}

func (addTo) MessageName() string { return "counter.Add" }

type counterV1 struct{ Count int }

type counterV2 struct {
	Total int // Count, renamed
	Adds  int // adds handled by version 2
}

func counterSagas() (v1 *saga.Definition[counterV1], v2 *saga.Definition[counterV2]) {
	v1 = saga.Define[counterV1]("counter")
	saga.StartedBy(v1, saga.By(func(m addTo) string { return m.ID }),
		func(_ context.Context, c *saga.Context[counterV1], m addTo) error {
			c.Data.Count += m.N
			return nil
		})
	v2 = saga.Define[counterV2]("counter", saga.DataVersion(2,
		saga.Upcast(func(old counterV1) (counterV2, error) { return counterV2{Total: old.Count}, nil })))
	saga.StartedBy(v2, saga.By(func(m addTo) string { return m.ID }),
		func(_ context.Context, c *saga.Context[counterV2], m addTo) error {
			c.Data.Total += m.N
			c.Data.Adds++
			return nil
		})
	return v1, v2
}

// putLog records every record a store wrote, with its revision and
// the data version it carries, across the nodes of a test.
type putLog struct {
	mu   sync.Mutex
	puts map[string][]versionedPut
}

type versionedPut struct {
	rev     uint64
	version int // 1 when the record has none
}

type loggedStore struct {
	saga.Store
	log *putLog
}

func (s loggedStore) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	n, err := s.Store.Put(ctx, key, value, rev)
	if err == nil {
		var r struct {
			Version int `json:"version"`
		}
		if jerr := json.Unmarshal(value, &r); jerr != nil {
			panic(fmt.Sprintf("test: saga record is not JSON: %v", jerr))
		}
		s.log.mu.Lock()
		s.log.puts[key] = append(s.log.puts[key], versionedPut{rev: n, version: max(r.Version, 1)})
		s.log.mu.Unlock()
	}
	return n, err
}

// overwrites lists the records a version-1 write replaced after a
// version-2 write, by revision.
func (l *putLog) overwrites() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for key, ps := range l.puts {
		ps = slices.Clone(ps)
		slices.SortFunc(ps, func(a, b versionedPut) int { return int(a.rev) - int(b.rev) })
		for i := 1; i < len(ps); i++ {
			if ps[i].version < ps[i-1].version {
				out = append(out, fmt.Sprintf("%s: revision %d (version %d) after revision %d (version %d)",
					key, ps[i].rev, ps[i].version, ps[i-1].rev, ps[i-1].version))
			}
		}
	}
	return out
}

// TestRollingDeployOfDataVersion2 runs a rolling deploy of a saga's
// data from version 1 to 2 on one queue of a real server, under a steady
// stream of messages: two version-1 workers, then a version-2 worker
// joins and one version-1 worker leaves, the version-2 worker restarts
// (for a while the only worker is version 1, and it must leave the
// instances version 2 wrote alone), two version-2 workers replace the
// last version-1 worker. Every instance ends with the sum of what was
// sent; no record written by version 2 is ever written by version 1;
// the version-1 worker's version waits are counted.
func TestRollingDeployOfDataVersion2(t *testing.T) {
	srv := startServer(t)
	v1, v2 := counterSagas()
	const queue, instances = "counter", 12
	log := &putLog{puts: make(map[string][]versionedPut)}
	var steps stepLog
	type worker struct {
		name    string
		version int
		run     *running
	}
	start := func(name string, version int) *worker {
		n := newNode(t, srv.ClientURL())
		var def saga.Saga = v1
		if version == 2 {
			def = v2
		}
		d := n.dispatcher(t, loggedStore{n.store, log}, queue, saga.WithSagas(def), saga.WithHooks(steps.hooks()),
			saga.WithVersionWait(200*time.Millisecond), saga.WithRetry(fastRetry))
		return &worker{name: name, version: version, run: run(t, d)}
	}
	stop := func(w *worker) {
		t.Helper()
		if err := w.run.wait(15 * time.Second); err != nil {
			t.Fatalf("stopping %s: %v", w.name, err)
		}
	}
	sender := newNode(t, srv.ClientURL())
	sd := sender.dispatcher(t, nil, queue, saga.WithSagas(v2))
	q := sender.openQueue(t, transport.QueueConfig{Name: queue})

	var sentMu sync.Mutex
	sent := make(map[string]int)
	var nsent atomic.Int64
	send := func(i int) {
		id := fmt.Sprintf("c%d", i%instances)
		if _, err := sd.Send(ctxFor(t), addTo{ID: id, N: i%5 + 1}, saga.WithMessageID(fmt.Sprintf("add-%d", i))); err != nil {
			t.Errorf("send %d: %v", i, err)
			return
		}
		sentMu.Lock()
		sent[id] += i%5 + 1
		sentMu.Unlock()
		nsent.Add(1)
	}
	// A steady stream of adds until the deploy is over.
	streamCtx, stopStream := context.WithCancel(t.Context())
	streamDone := make(chan struct{})
	go func() {
		defer close(streamDone)
		for i := 0; streamCtx.Err() == nil; i++ {
			send(i)
			select {
			case <-streamCtx.Done():
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	waits := func() int {
		n := 0
		for _, e := range steps.filter("") {
			if e.Result.Outcome == saga.VersionWait {
				if !errors.Is(e.Result.Err, saga.ErrDataVersionAhead) {
					t.Errorf("version wait with error %v, want one matching ErrDataVersionAhead", e.Result.Err)
				}
				n++
			}
		}
		return n
	}

	a, b := start("v1-a", 1), start("v1-b", 1)
	sentBy := func(n int64) func() bool { return func() bool { return nsent.Load() >= n } }
	testutil.AwaitTrue(t, 30*time.Second, "100 adds sent", sentBy(100))
	c := start("v2-c", 2)
	stop(a)
	testutil.AwaitTrue(t, 30*time.Second, "version 2 writes records", func() bool { return log.versions()[2] > 0 })
	stop(c) // version 2 restarts: version 1 alone meets records version 2 wrote
	testutil.AwaitTrue(t, 30*time.Second, "version 1 leaves records of version 2 alone", func() bool { return waits() > 0 })
	d, e := start("v2-d", 2), start("v2-e", 2)
	stop(b)
	mark := nsent.Load()
	testutil.AwaitTrue(t, 30*time.Second, "100 adds more sent", sentBy(mark+100))
	stopStream()
	<-streamDone

	if o := log.overwrites(); len(o) > 0 {
		t.Errorf("records of version 2 overwritten by version 1:\n%s", o)
	}
	reader := sender.dispatcher(t, nil, queue, saga.WithSagas(v2))
	testutil.Await(t, 60*time.Second, func() string {
		sentMu.Lock()
		defer sentMu.Unlock()
		for id, want := range sent {
			got, inst, err := saga.InstanceOf(ctxFor(t), reader, v2, id)
			if err != nil {
				return fmt.Sprintf("%s: %v", id, err)
			}
			if got.Total != want || inst.DataVersion != 2 {
				return fmt.Sprintf("%s: total %d (data version %d), want %d (version 2)", id, got.Total, inst.DataVersion, want)
			}
		}
		return queueEmpty(t, q)
	})
	if o := log.overwrites(); len(o) > 0 {
		t.Errorf("records of version 2 overwritten by version 1:\n%s", o)
	}
	t.Logf("%d adds to %d instances; %d version waits; writes by version: %v", nsent.Load(), instances, waits(), log.versions())
	stop(d)
	stop(e)
}

func (l *putLog) versions() map[int]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[int]int)
	for _, ps := range l.puts {
		for _, p := range ps {
			out[p.version]++
		}
	}
	return out
}
