package pgtest_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/pgtest"
	"github.com/jetsaga/jetsaga/internal/testutil"
)

// TestRestart restarts the server both ways: committed data survives, the
// server accepts connections on the same URL again, and a session open
// across the restart is ended.
func TestRestart(t *testing.T) {
	u := pg.NewDatabase(t)
	psql := func(sql string) (string, error) {
		out, err := exec.CommandContext(t.Context(), "psql", "-XAtqc", sql, u).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := psql("CREATE TABLE t (n int); INSERT INTO t VALUES (1)"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for i, mode := range []pgtest.Shutdown{pgtest.Fast, pgtest.Immediate} {
		// A session that sleeps across the restart: it must end, broken.
		sleeper := exec.CommandContext(t.Context(), "psql", "-XAtqc", "SELECT pg_sleep(600)", u)
		if err := sleeper.Start(); err != nil {
			t.Fatal(err)
		}
		testutil.AwaitTrue(t, time.Minute, "the sleeping session", func() bool {
			out, _ := psql("SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(600)'")
			return out == "1"
		})
		if err := pg.Restart(t.Context(), mode); err != nil {
			t.Fatalf("restart (%v): %v", mode, err)
		}
		if err := sleeper.Wait(); err == nil {
			t.Errorf("a session survived a %v restart", mode)
		}
		if out, err := psql("INSERT INTO t VALUES (1); SELECT count(*) FROM t"); err != nil || out != string(rune('2'+i)) {
			t.Fatalf("after a %v restart: %q, %v; want %d rows", mode, out, err, 2+i)
		}
	}
}
