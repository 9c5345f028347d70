package pgtest_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/jetsaga/jetsaga/internal/pgtest"
)

var pg *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, &pg) }

func TestNewDatabase(t *testing.T) {
	a, b := pg.NewDatabase(t), pg.NewDatabase(t)
	if a == b {
		t.Fatalf("two databases with one URL %s", a)
	}
	for _, u := range []string{pg.URL(), a, b} {
		// psql's exit code says whether it connected and ran the query.
		out, err := exec.CommandContext(t.Context(), "psql", "-XAtc", "SELECT current_database()", u).CombinedOutput()
		if err != nil {
			t.Fatalf("psql %s: %v\n%s", u, err, out)
		}
		if want := u[strings.LastIndex(u, "/")+1 : strings.Index(u, "?")]; strings.TrimSpace(string(out)) != want {
			t.Errorf("connected to %s, want %s", out, want)
		}
	}
}

func TestErrNotInstalledSaysWhatToInstall(t *testing.T) {
	if msg := pgtest.ErrNotInstalled.Error(); !strings.Contains(msg, "apt-get install -y postgresql") {
		t.Errorf("ErrNotInstalled = %q: it should say what to install", msg)
	}
}
