package pgtest_test

import (
	"os"
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

// TestMissingPostgreSQLFails runs this test binary again where it finds
// no PostgreSQL: Main must fail it, saying what to install, and run no
// test (a skip would count as a pass).
func TestMissingPostgreSQLFails(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestNewDatabase$", "-test.v")
	cmd.Env = append(os.Environ(), pgtest.EnvBin+"="+t.TempDir(), pgtest.EnvURL+"=")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the tests passed without PostgreSQL:\n%s", out)
	}
	if !strings.Contains(string(out), "apt-get install -y postgresql") {
		t.Errorf("the failure does not say what to install:\n%s", out)
	}
	if strings.Contains(string(out), "=== RUN") {
		t.Errorf("tests ran without a server:\n%s", out)
	}
}
