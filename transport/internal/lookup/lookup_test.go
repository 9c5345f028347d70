package lookup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
)

// Lookups asked while one is under way wait and go out together: every
// receiver gets the answer for its own subjects, a failed lookup fails
// each receiver that shared it and no other, no lookup asks more than
// MaxFilters subjects, and each receiver makes at most one. The lookup
// is a stand-in that answers "found" for the subjects it was asked that
// end in ".hit", so that what each receiver got can be checked; the first
// one blocks until every other receiver has asked.
func TestLookupGroupGathers(t *testing.T) {
	const receivers = 40
	var g Group
	release := make(chan struct{})
	var calls atomic.Int64
	var mu sync.Mutex
	var asked [][]string
	do := func(_ context.Context, filters []string) ([]string, error) {
		n := calls.Add(1)
		if n == 1 {
			<-release
		}
		mu.Lock()
		asked = append(asked, slices.Clone(filters))
		mu.Unlock()
		if len(filters) > MaxFilters {
			return nil, fmt.Errorf("%d subjects in one lookup", len(filters))
		}
		var found []string
		for _, f := range filters {
			if f == "fail" {
				return nil, errors.New("injected")
			}
			if len(f) > 4 && f[len(f)-4:] == ".hit" {
				found = append(found, f)
			}
		}
		return found, nil
	}
	type result struct {
		found []string
		err   error
	}
	results := make([]result, receivers)
	filtersOf := func(i int) []string {
		// 10 subjects each, one of them found; receiver 7 asks one that
		// fails its lookup.
		var fs []string
		for j := range 10 {
			fs = append(fs, fmt.Sprintf("r%d.k%d", i, j))
		}
		fs[3] += ".hit"
		if i == 7 {
			fs = append(fs, "fail")
		}
		return fs
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		found, err := g.Lookup(t.Context(), filtersOf(0), do)
		results[0] = result{found, err}
	})
	testutil.AwaitTrue(t, 10*time.Second, "the first lookup under way", func() bool { return calls.Load() == 1 })
	for i := 1; i < receivers; i++ {
		wg.Go(func() {
			found, err := g.Lookup(t.Context(), filtersOf(i), do)
			results[i] = result{found, err}
		})
	}
	testutil.AwaitTrue(t, 10*time.Second, "every other receiver waiting", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		n := 0
		for _, b := range g.next {
			n += len(b.filters)
		}
		return n == (receivers-1)*10+1
	})
	close(release)
	wg.Wait()

	// 1 + ceil(391 / 256) lookups: 3.
	if n := calls.Load(); n != 3 {
		t.Errorf("%d lookups for %d receivers, want 3", n, receivers)
	}
	for _, fs := range asked {
		if len(fs) > MaxFilters {
			t.Errorf("a lookup asked %d subjects", len(fs))
		}
	}
	failedWith7 := map[int]bool{}
	for _, fs := range asked {
		if slices.Contains(fs, "fail") {
			for i := range receivers {
				if slices.Contains(fs, filtersOf(i)[0]) {
					failedWith7[i] = true
				}
			}
		}
	}
	for i, r := range results {
		if failedWith7[i] {
			if r.err == nil {
				t.Errorf("receiver %d shared the failed lookup but got no error", i)
			}
			continue
		}
		if r.err != nil {
			t.Errorf("receiver %d: %v", i, r.err)
			continue
		}
		if want := filtersOf(i)[3]; !slices.Contains(r.found, want) {
			t.Errorf("receiver %d: found %v, lacks %s", i, r.found, want)
		}
	}
	if len(failedWith7) == 0 || len(failedWith7) == receivers {
		t.Errorf("the failed lookup was shared by %d receivers", len(failedWith7))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running || len(g.next) > 0 {
		t.Errorf("after the lookups: running %v, %d waiting", g.running, len(g.next))
	}
}
