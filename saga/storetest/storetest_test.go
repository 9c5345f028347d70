package storetest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/saga/storetest"
)

// reusingStore is a deliberately broken store: each key counts its own
// revisions from 1, so a record deleted and created again comes back at
// revisions it had — the mistake a SQL store with a per-row counter
// makes, which would have the dispatcher's record cache lose updates.
type reusingStore struct {
	mu   sync.Mutex
	recs map[string]rec
}

type rec struct {
	v   []byte
	rev uint64
}

func (s *reusingStore) Load(_ context.Context, k string) ([]byte, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[k]
	if !ok {
		return nil, 0, saga.ErrNotFound
	}
	return append([]byte(nil), r.v...), r.rev, nil
}

func (s *reusingStore) Put(_ context.Context, k string, v []byte, rev uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recs[k].rev != rev {
		return 0, fmt.Errorf("%w: %s", saga.ErrConflict, k)
	}
	if s.recs == nil {
		s.recs = map[string]rec{}
	}
	s.recs[k] = rec{append([]byte(nil), v...), rev + 1}
	return rev + 1, nil
}

func (s *reusingStore) Delete(_ context.Context, k string, rev uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[k]
	if !ok {
		return saga.ErrNotFound
	}
	if r.rev != rev {
		return saga.ErrConflict
	}
	delete(s.recs, k)
	return nil
}

const brokenEnv = "STORETEST_RUN_BROKEN"

// TestSuiteCatchesReusedRevisions runs the suite on reusingStore in a
// child process (this test binary again) and checks that it fails, on the
// revision rule and nothing else: the one mistake the store makes.
func TestSuiteCatchesReusedRevisions(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		storetest.Run(t, func(*testing.T) saga.Store { return &reusingStore{} }, storetest.Features{})
		return
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestSuiteCatchesReusedRevisions$", "-test.v")
	cmd.Env = append(os.Environ(), brokenEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the suite passed a store that reuses revisions after a delete:\n%s", out)
	}
	failed := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "--- FAIL: TestSuiteCatchesReusedRevisions/"); ok {
			name, _, _ = strings.Cut(name, " ")
			failed[name] = true
		}
	}
	if !failed["RevisionsNeverReusedAfterDelete"] || len(failed) != 1 {
		t.Fatalf("failed subtests %v, want only RevisionsNeverReusedAfterDelete:\n%s", failed, out)
	}
}

// smallStore is a store that refuses values over 512 KiB, as a SQL
// column of that size would: too small for a busy instance's inbox.
type smallStore struct{ saga.Store }

var errTooLarge = errors.New("value too large")

func (s smallStore) Put(ctx context.Context, k string, v []byte, rev uint64) (uint64, error) {
	if len(v) > 512<<10 {
		return 0, errTooLarge
	}
	return s.Store.Put(ctx, k, v, rev)
}

const smallEnv = "STORETEST_RUN_SMALL"

// TestSuiteCatchesSmallValueLimit: the suite fails a store that cannot
// hold a record of storetest.LargeRecord bytes, on that alone.
func TestSuiteCatchesSmallValueLimit(t *testing.T) {
	if os.Getenv(smallEnv) != "" {
		storetest.Run(t, func(*testing.T) saga.Store { return smallStore{memstore.New()} }, storetest.Features{})
		return
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestSuiteCatchesSmallValueLimit$", "-test.v")
	cmd.Env = append(os.Environ(), smallEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the suite passed a store that refuses values over 512 KiB:\n%s", out)
	}
	failed := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "--- FAIL: TestSuiteCatchesSmallValueLimit/"); ok {
			name, _, _ = strings.Cut(name, " ")
			failed[name] = true
		}
	}
	if !failed["LargeRecords"] || len(failed) != 1 {
		t.Fatalf("failed subtests %v, want only LargeRecords:\n%s", failed, out)
	}
}
