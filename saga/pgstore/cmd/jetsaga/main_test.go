package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jetsaga/jetsaga/internal/cli"
	"github.com/jetsaga/jetsaga/internal/pgtest"
	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/pgstore"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

var pg *pgtest.Server

func TestMain(m *testing.M) {
	srv, err := pgtest.Start(context.Background())
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the command's tests need PostgreSQL: %v\n", err)
		os.Exit(1)
	}
	pg = srv
	code := m.Run()
	srv.Stop()
	os.Exit(code)
}

type (
	Ordered struct{ ID string }
	remind  struct{}
)

func (Ordered) MessageName() string { return "pgcmd.test.Ordered" }
func (remind) MessageName() string  { return "pgcmd.test.Remind" }

// TestSagasOnPostgres: the commands read the records a service keeps in
// PostgreSQL with --pg (and $JETSAGA_PG_URL), and cancel-timeouts changes
// them there; without it they look for a KV bucket.
func TestSagasOnPostgres(t *testing.T) {
	ctx := t.Context()
	url := pg.NewDatabase(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	store, err := pgstore.New(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	ns := testutil.StartServer(t, embedded.Options{})
	nc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b, err := transport.NewJetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	def := saga.Define[struct{}]("order")
	saga.StartedBy(def, saga.By(func(m Ordered) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[struct{}], _ Ordered) error {
			_, err := c.RequestTimeout(time.Hour, remind{})
			return err
		})
	saga.OnTimeout(def, func(context.Context, *saga.Context[struct{}], remind) error { return nil })
	d, err := saga.NewDispatcher(b, store, "orders", saga.WithSagas(def), saga.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Open(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.RunUntilCleanup(t, d.Run)
	if _, err := d.Send(ctx, Ordered{ID: "o-1"}); err != nil {
		t.Fatal(err)
	}
	testutil.Await(t, 20*time.Second, func() string {
		inst, err := d.Instance(ctx, "order", "o-1")
		if err != nil {
			return err.Error()
		}
		if len(inst.Timeouts) != 1 {
			return fmt.Sprintf("timeouts %+v, want one", inst.Timeouts)
		}
		return ""
	})

	base := []string{"--server", ns.ClientURL()}
	out, code := runCmd(t, append(base, "--pg", url, "sagas", "list", "--json")...)
	if code != cli.ExitOK {
		t.Fatalf("sagas list --pg: exit %d: %s", code, out)
	}
	var types []cli.SagaType
	if err := json.Unmarshal([]byte(out), &types); err != nil {
		t.Fatalf("sagas list --json: %v: %s", err, out)
	}
	if len(types) != 1 || types[0].Saga != "order" || types[0].Instances != 1 {
		t.Fatalf("sagas list --pg: %+v, want order with 1 instance", types)
	}

	t.Setenv("JETSAGA_PG_URL", url)
	out, code = runCmd(t, append(base, "sagas", "show", "order", "o-1", "--json")...)
	if code != cli.ExitOK || !strings.Contains(out, "o-1") || !strings.Contains(out, "pgcmd.test.Remind") {
		t.Fatalf("sagas show with $JETSAGA_PG_URL: exit %d: %s", code, out)
	}
	out, code = runCmd(t, append(base, "sagas", "cancel-timeouts", "order", "o-1", "--queue", "orders", "--yes")...)
	if code != cli.ExitOK {
		t.Fatalf("sagas cancel-timeouts: exit %d: %s", code, out)
	}
	inst, err := d.Instance(ctx, "order", "o-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(inst.Timeouts) != 0 {
		t.Fatalf("after cancel-timeouts: %+v pending in PostgreSQL, want none", inst.Timeouts)
	}

	t.Setenv("JETSAGA_PG_URL", "")
	if out, code := runCmd(t, append(base, "sagas", "list")...); code != cli.ExitNotFound {
		t.Fatalf("sagas list without --pg: exit %d, want %d (no KV bucket): %s", code, cli.ExitNotFound, out)
	}
	// A table that is not there is reported, not listed as empty.
	t.Setenv("JETSAGA_PG_TABLE", "missing")
	if out, code := runCmd(t, append(base, "--pg", url, "sagas", "list")...); code == cli.ExitOK || !strings.Contains(out, "migration") {
		t.Fatalf("sagas list on a missing table: exit %d: %s", code, out)
	}
}

func runCmd(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	code := run(t.Context(), args, strings.NewReader(""), &out, &out, cli.WithTerminal(func(io.Reader) bool { return false }))
	return out.String(), code
}
