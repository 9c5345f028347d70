package kvstore_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
)

// TestListIndexPrefix: the keys under a prefix of several whole tokens
// (an index value's entries) come from one batched direct get, without
// deleted keys and without the keys of a longer value; a prefix with more
// keys than one batch is listed in full all the same.
func TestListIndexPrefix(t *testing.T) {
	ctx := t.Context()
	s, err := kvstore.New(ctx, connectJS(t), kvstore.Config{Bucket: "listprefix"})
	if err != nil {
		t.Fatal(err)
	}
	put := func(k string) uint64 {
		t.Helper()
		rev, err := s.Put(ctx, k, []byte("x"), 0)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	put("=ix.s.n.dg.a")
	put("=ix.s.n.dg.b")
	put("=ix.s.n.dgx.c")
	put("=ix.s.n.dg")
	if err := s.Delete(ctx, "=ix.s.n.dg.d", put("=ix.s.n.dg.d")); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListDirect(ctx, "=ix.s.n.dg.")
	if err != nil {
		t.Fatalf("direct listing: %v", err)
	}
	slices.Sort(got)
	if want := []string{"=ix.s.n.dg.a", "=ix.s.n.dg.b"}; !slices.Equal(got, want) {
		t.Fatalf("direct listing: got %q, want %q", got, want)
	}
	if got, err := s.ListDirect(ctx, "=ix.s.n.none."); err != nil || len(got) != 0 {
		t.Fatalf("direct listing of no key: got %q, %v", got, err)
	}

	var want []string
	for i := range 600 {
		k := fmt.Sprintf("=ix.s.n.many.%03d", i)
		put(k)
		want = append(want, k)
	}
	var all []string
	for k, err := range saga.ListingStore(s).ListKeys(ctx, "=ix.s.n.many.") {
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, k)
	}
	slices.Sort(all)
	if !slices.Equal(all, want) {
		t.Fatalf("listing 600 keys: got %d, want 600", len(all))
	}
}
