package pgstore_test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/pgtest"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/pgstore"
	"github.com/jetsaga/jetsaga/saga/storetest"
)

// features: expiry is by the server's clock to the microsecond, so the
// expiry tests need not wait whole seconds.
var features = storetest.Features{TTL: 300 * time.Millisecond, ExpiryLag: 2 * time.Second}

// TestConformance runs the Store conformance suite, a table per subtest.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) saga.Store { return newStore(t) }, features)
}

// TestConformanceLocking runs the suite on a Store WithLocking.
func TestConformanceLocking(t *testing.T) {
	storetest.Run(t, func(t *testing.T) saga.Store { return newStore(t, pgstore.WithLocking()) }, features)
}

// TestConformanceWithoutSession runs the suite on Store.WithoutSession.
func TestConformanceWithoutSession(t *testing.T) {
	storetest.Run(t, func(t *testing.T) saga.Store { return newStore(t).WithoutSession() }, features)
}

const brokenEnv = "PGSTORE_RUN_BROKEN"

// TestSuiteCatchesReusedRevisions runs the suite on a Store broken to
// count each row's revisions from 1 (pgstore.ReuseRevisions) in a child
// process (this test binary again, on this binary's server) and checks
// that it fails on the revision rules and nothing else.
func TestSuiteCatchesReusedRevisions(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		storetest.Run(t, func(t *testing.T) saga.Store {
			s := newStore(t)
			pgstore.ReuseRevisions(s)
			return s
		}, features)
		return
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestSuiteCatchesReusedRevisions$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), brokenEnv+"=1", pgtest.EnvURL+"="+pg.URL())
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the suite passed a store that reuses revisions:\n%s", out)
	}
	var failed []string
	for line := range strings.Lines(string(out)) {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "--- FAIL: TestSuiteCatchesReusedRevisions/"); ok {
			name, _, _ = strings.Cut(name, " ")
			failed = append(failed, name)
		}
	}
	slices.Sort(failed)
	want := []string{"RevisionsNeverReusedAfterDelete", "RevisionsNeverReusedAfterExpiry"}
	if !slices.Equal(failed, want) {
		t.Fatalf("failed subtests %v, want %v:\n%s", failed, want, out)
	}
}
