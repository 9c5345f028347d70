// Package storetest is the conformance suite of [saga.Store]: what a store
// must do for the dispatcher to keep its promises. Run it from a test of
// your own store, as kvstore and memstore do:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) saga.Store { return newMyStore(t) }, storetest.Features{})
//	}
//
// It checks conditional writes (create only if absent, update and delete
// only at the record's revision, [saga.ErrConflict] otherwise),
// [saga.ErrNotFound] for a missing record, values copied in and out,
// records of LargeRecord bytes (a busy instance's inbox), one
// winner among concurrent writers and no lost update, and the rule that
// matters most: a revision is never reused for a key, also after the
// record was deleted or expired. On a [saga.ExpiringStore] it also checks
// that PutTTL expires a record and that a later Put keeps it for good.
//
// The Index cases run dispatchers of a saga with indexes ([saga.Index]) on
// the store, on an in-memory transport: an index's entries are keys of
// the store beside the records ("=ix.SAGA.INDEX.VALUE[.ID]", saga.IndexKeyPrefix), listed by
// prefix ([saga.ListingStore]; skipped, and said so, on a store that is
// not one). They check that entries change with the record or not at
// all — a step killed between its entries and its record never makes Find
// or ByIndex return an instance whose record lacks the value, nor miss
// one whose record has it — that a message correlated by a value its
// instance dropped, or completed with, never reaches that instance, that
// a unique index keeps one instance per value under concurrent starts
// from three dispatchers, and that bad index values are refused.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
)

// Features describes the store under test.
type Features struct {
	// TTL is the time-to-live the expiry tests give PutTTL: the shortest
	// the store honours. Default: 1s.
	TTL time.Duration
	// ExpiryLag bounds how long after its TTL an expired record may still
	// be loaded. Default: 5s.
	ExpiryLag time.Duration
}

// Run runs the suite; newStore returns an empty store for each test, which
// may share state only through keys that the other tests do not use.
func Run(t *testing.T, newStore func(t *testing.T) saga.Store, f Features) {
	if f.TTL == 0 {
		f.TTL = time.Second
	}
	if f.ExpiryLag == 0 {
		f.ExpiryLag = 5 * time.Second
	}
	tests := []struct {
		name string
		run  func(t *testing.T, s saga.Store, f Features)
	}{
		{"LoadMissing", testLoadMissing},
		{"Create", testCreate},
		{"Update", testUpdate},
		{"Delete", testDelete},
		{"RevisionsNeverReusedAfterDelete", testNoReuseAfterDelete},
		{"RevisionsGrowAcrossKeys", testRevisionsAcrossKeys},
		{"ValuesCopied", testValuesCopied},
		{"LargeRecords", testLargeRecords},
		{"KeysTheDispatcherMakes", testKeys},
		{"ConcurrentCreate", testConcurrentCreate},
		{"NoLostUpdate", testNoLostUpdate},
		{"Expiry", testExpiry},
		{"RevisionsNeverReusedAfterExpiry", testNoReuseAfterExpiry},
		{"PutKeepsForGood", testPutClearsTTL},
		{"IndexFind", indexCase(testIndexFind)},
		{"IndexByIndex", indexCase(testByIndex)},
		{"IndexByIndexMoved", indexCase(testByIndexMoved)},
		{"IndexUniqueStarts", indexCase(testIndexUniqueStarts)},
		{"IndexUniqueTaken", indexCase(testIndexUniqueTaken)},
		{"IndexBadInput", indexCase(testIndexBadInput)},
		{"IndexKilledBetweenWrites", indexCase(testIndexKilledBetweenWrites)},
		{"IndexStepDied", indexCase(testIndexStepDied)},
		{"IndexReindex", indexCase(testIndexReindex)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, newStore(t), f)
		})
	}
}

// key is the form of the dispatcher's keys: saga name and encoded ID.
func key(name string) string { return "storetest." + name }

func load(t *testing.T, s saga.Store, k string) ([]byte, uint64) {
	t.Helper()
	v, rev, err := s.Load(t.Context(), k)
	if err != nil {
		t.Fatalf("Load(%s): %v", k, err)
	}
	return v, rev
}

func put(t *testing.T, s saga.Store, k, v string, rev uint64) uint64 {
	t.Helper()
	n, err := s.Put(t.Context(), k, []byte(v), rev)
	if err != nil {
		t.Fatalf("Put(%s, %q, rev %d): %v", k, v, rev, err)
	}
	if n == 0 {
		t.Fatalf("Put(%s, %q, rev %d) returned revision 0: revisions start at 1", k, v, rev)
	}
	return n
}

func wantErr(t *testing.T, op string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want one matching %v", op, err, want)
	}
}

func wantValue(t *testing.T, s saga.Store, k, want string, wantRev uint64) {
	t.Helper()
	v, rev := load(t, s, k)
	if string(v) != want || rev != wantRev {
		t.Fatalf("Load(%s) = %q at revision %d, want %q at revision %d", k, v, rev, want, wantRev)
	}
}

func testLoadMissing(t *testing.T, s saga.Store, _ Features) {
	_, _, err := s.Load(t.Context(), key("missing"))
	wantErr(t, "Load of a key never written", err, saga.ErrNotFound)
}

func testCreate(t *testing.T, s saga.Store, _ Features) {
	k := key("create")
	r1 := put(t, s, k, "one", 0)
	wantValue(t, s, k, "one", r1)
	_, err := s.Put(t.Context(), k, []byte("two"), 0)
	wantErr(t, "Put with revision 0 of an existing record", err, saga.ErrConflict)
	wantValue(t, s, k, "one", r1)
	_, err = s.Put(t.Context(), key("create-other"), []byte("x"), r1)
	wantErr(t, "Put with a revision of a missing record", err, saga.ErrConflict)
	_, _, err = s.Load(t.Context(), key("create-other"))
	wantErr(t, "Load after a refused Put", err, saga.ErrNotFound)
}

func testUpdate(t *testing.T, s saga.Store, _ Features) {
	k := key("update")
	r1 := put(t, s, k, "one", 0)
	r2 := put(t, s, k, "two", r1)
	if r2 <= r1 {
		t.Fatalf("update returned revision %d after %d: revisions must grow", r2, r1)
	}
	wantValue(t, s, k, "two", r2)
	_, err := s.Put(t.Context(), k, []byte("stale"), r1)
	wantErr(t, "Put at a stale revision", err, saga.ErrConflict)
	_, err = s.Put(t.Context(), k, []byte("future"), r2+1000)
	wantErr(t, "Put at a revision the record never had", err, saga.ErrConflict)
	wantValue(t, s, k, "two", r2)
}

func testDelete(t *testing.T, s saga.Store, _ Features) {
	k := key("delete")
	r1 := put(t, s, k, "one", 0)
	r2 := put(t, s, k, "two", r1)
	wantErr(t, "Delete at a stale revision", s.Delete(t.Context(), k, r1), saga.ErrConflict)
	wantValue(t, s, k, "two", r2)
	if err := s.Delete(t.Context(), k, r2); err != nil {
		t.Fatalf("Delete at the record's revision: %v", err)
	}
	_, _, err := s.Load(t.Context(), k)
	wantErr(t, "Load after Delete", err, saga.ErrNotFound)
	wantErr(t, "Delete of a deleted record", s.Delete(t.Context(), k, r2), saga.ErrNotFound)
	wantErr(t, "Delete of a key never written", s.Delete(t.Context(), key("delete-missing"), 1), saga.ErrNotFound)
}

// The record cache takes "same revision" to mean "same record": a record
// deleted and created again must not come back at a revision it had.
func testNoReuseAfterDelete(t *testing.T, s saga.Store, _ Features) {
	k := key("reuse")
	seen := map[uint64]bool{}
	var last uint64
	for round := range 3 {
		r := put(t, s, k, "created "+strconv.Itoa(round), 0)
		for i := range 3 {
			if seen[r] || r <= last {
				t.Fatalf("round %d: revision %d after %d (seen before: %t): a key's revisions must never come back, also after a delete", round, r, last, seen[r])
			}
			seen[r], last = true, r
			if i < 2 {
				r = put(t, s, k, fmt.Sprintf("update %d.%d", round, i), r)
			}
		}
		if err := s.Delete(t.Context(), k, r); err != nil {
			t.Fatalf("Delete: %v", err)
		}
	}
	// A writer that still holds a revision from before the delete loses.
	r := put(t, s, k, "again", 0)
	for old := range seen {
		if _, err := s.Put(t.Context(), k, []byte("stale writer"), old); err == nil {
			t.Fatalf("Put at revision %d, from before the record was deleted and created again, succeeded", old)
		}
	}
	wantValue(t, s, k, "again", r)
}

func testRevisionsAcrossKeys(t *testing.T, s saga.Store, _ Features) {
	a, b := key("across-a"), key("across-b")
	ra := put(t, s, a, "a", 0)
	rb := put(t, s, b, "b", 0)
	ra2 := put(t, s, a, "a2", ra)
	// Each key's revisions grow; the store may share one sequence among
	// keys (kvstore, memstore) or not, but b's revision is no use on a.
	if ra2 <= ra {
		t.Fatalf("revisions of %s: %d then %d", a, ra, ra2)
	}
	if rb != ra2 {
		if _, err := s.Put(t.Context(), a, []byte("x"), rb); !errors.Is(err, saga.ErrConflict) {
			t.Fatalf("Put on %s at %s's revision %d: got %v, want ErrConflict", a, b, rb, err)
		}
	}
	wantValue(t, s, b, "b", rb)
}

func testValuesCopied(t *testing.T, s saga.Store, _ Features) {
	k := key("copied")
	r := put(t, s, k, "first", 0)
	buf := []byte("original")
	r, err := s.Put(t.Context(), k, buf, r)
	if err != nil {
		t.Fatal(err)
	}
	copy(buf, "mutated!")
	v, _ := load(t, s, k)
	if !bytes.Equal(v, []byte("original")) {
		t.Fatalf("the store kept the caller's slice: after the caller changed it, Load = %q", v)
	}
	copy(v, "mutated!")
	wantValue(t, s, k, "original", r)
}

// LargeRecord is the size of a record the store must hold: the record of
// a busy instance whose inbox holds saga.InboxLimit messages (about 600
// KB) with data beside it.
const LargeRecord = 768 << 10

func testLargeRecords(t *testing.T, s saga.Store, _ Features) {
	k := key("large")
	big := bytes.Repeat([]byte("0123456789abcdef"), LargeRecord/16)
	r, err := s.Put(t.Context(), k, big, 0)
	if err != nil {
		t.Fatalf("Put of %d bytes: %v", len(big), err)
	}
	big[0] = 'x'
	if r, err = s.Put(t.Context(), k, big, r); err != nil {
		t.Fatalf("Put of %d bytes over %d bytes: %v", len(big), len(big), err)
	}
	v, rev := load(t, s, k)
	if rev != r || !bytes.Equal(v, big) {
		t.Fatalf("Load: %d bytes at revision %d, want the %d bytes written at %d", len(v), rev, len(big), r)
	}
}

func testKeys(t *testing.T, s saga.Store, _ Features) {
	// Keys are made of [A-Za-z0-9_=-] and '.' (a saga name and an
	// encoded instance ID); keys that differ only there are distinct.
	keys := []string{"orders.Zm9v", "orders.Zm9v=", "orders.Zm9v_-", "orders_x.Zm9v", "orders-x.a.b"}
	revs := map[string]uint64{}
	for _, k := range keys {
		revs[k] = put(t, s, k, "value of "+k, 0)
	}
	for _, k := range keys {
		wantValue(t, s, k, "value of "+k, revs[k])
	}
}

func testConcurrentCreate(t *testing.T, s saga.Store, _ Features) {
	k := key("race")
	const n = 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	var won []string
	for i := range n {
		wg.Go(func() {
			v := "writer " + strconv.Itoa(i)
			_, err := s.Put(context.WithoutCancel(t.Context()), k, []byte(v), 0)
			switch {
			case err == nil:
				mu.Lock()
				won = append(won, v)
				mu.Unlock()
			case !errors.Is(err, saga.ErrConflict):
				t.Errorf("concurrent create: %v, want nil or ErrConflict", err)
			}
		})
	}
	wg.Wait()
	if len(won) != 1 {
		t.Fatalf("%d of %d concurrent creates succeeded (%q), want exactly 1", len(won), n, won)
	}
	v, _ := load(t, s, k)
	if string(v) != won[0] {
		t.Fatalf("Load = %q, want the winner's %q", v, won[0])
	}
}

// Writers that each load, add one and write back, retrying on conflict,
// as the dispatcher does: no increment may be lost.
func testNoLostUpdate(t *testing.T, s saga.Store, _ Features) {
	k := key("counter")
	put(t, s, k, "0", 0)
	const writers, each = 4, 10
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			ctx := context.WithoutCancel(t.Context())
			for range each {
				for {
					v, rev, err := s.Load(ctx, k)
					if err != nil {
						t.Errorf("Load: %v", err)
						return
					}
					n, _ := strconv.Atoi(string(v))
					_, err = s.Put(ctx, k, []byte(strconv.Itoa(n+1)), rev)
					if err == nil {
						break
					}
					if !errors.Is(err, saga.ErrConflict) {
						t.Errorf("Put: %v", err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	v, _ := load(t, s, k)
	if string(v) != strconv.Itoa(writers*each) {
		t.Fatalf("counter = %s after %d increments: updates were lost", v, writers*each)
	}
}

func expiring(t *testing.T, s saga.Store) saga.ExpiringStore {
	t.Helper()
	es, ok := s.(saga.ExpiringStore)
	if !ok {
		// Not a failure and not a pass: the store does not have the
		// feature, and the dispatcher then keeps tombstones for good.
		t.Skipf("%T is not a saga.ExpiringStore", s)
	}
	return es
}

// awaitGone waits until k no longer loads, at most ttl plus the lag.
func awaitGone(t *testing.T, s saga.Store, k string, written time.Time, f Features) {
	t.Helper()
	deadline := written.Add(f.TTL + f.ExpiryLag)
	for {
		_, _, err := s.Load(t.Context(), k)
		if errors.Is(err, saga.ErrNotFound) {
			return
		}
		if err != nil {
			t.Fatalf("Load while waiting for expiry: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still loads %v after its TTL of %v", k, f.ExpiryLag+f.TTL, f.TTL)
		}
		time.Sleep(f.TTL / 10)
	}
}

func testExpiry(t *testing.T, s saga.Store, f Features) {
	es := expiring(t, s)
	k := key("expiry")
	written := time.Now()
	r, err := es.PutTTL(t.Context(), k, []byte("short-lived"), 0, f.TTL)
	if err != nil {
		t.Fatalf("PutTTL: %v", err)
	}
	if time.Since(written) < f.TTL/2 {
		wantValue(t, s, k, "short-lived", r)
	}
	awaitGone(t, s, k, written, f)
	if time.Since(written) < f.TTL {
		t.Fatalf("%s expired %v after PutTTL with a TTL of %v: early", k, time.Since(written), f.TTL)
	}
	r2 := put(t, s, k, "created again", 0)
	wantValue(t, s, k, "created again", r2)
}

func testNoReuseAfterExpiry(t *testing.T, s saga.Store, f Features) {
	es := expiring(t, s)
	k := key("reuse-expiry")
	r1 := put(t, s, k, "one", 0)
	written := time.Now()
	r2, err := es.PutTTL(t.Context(), k, []byte("completed"), r1, f.TTL)
	if err != nil {
		t.Fatalf("PutTTL at the record's revision: %v", err)
	}
	awaitGone(t, s, k, written, f)
	r3 := put(t, s, k, "new instance", 0)
	if r3 <= r2 {
		t.Fatalf("a record created after its predecessor expired got revision %d, not above the %d it had: revisions must never come back", r3, r2)
	}
	if _, err := s.Put(t.Context(), k, []byte("stale writer"), r2); err == nil {
		t.Fatalf("Put at revision %d, from before the record expired, succeeded", r2)
	}
}

func testPutClearsTTL(t *testing.T, s saga.Store, f Features) {
	es := expiring(t, s)
	k, marker := key("kept"), key("kept-marker")
	written := time.Now()
	r, err := es.PutTTL(t.Context(), k, []byte("expiring"), 0, f.TTL)
	if err != nil {
		t.Fatal(err)
	}
	r = put(t, s, k, "kept", r)
	// A record written with the same TTL at the same time shows when the
	// first would have expired.
	if _, err := es.PutTTL(t.Context(), marker, []byte("expiring"), 0, f.TTL); err != nil {
		t.Fatal(err)
	}
	awaitGone(t, s, marker, written, f)
	wantValue(t, s, k, "kept", r)
}
