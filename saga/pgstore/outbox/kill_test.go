package outbox_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jetsaga/jetsaga/internal/pgtest"
	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/transport"
)

// relayChild is a relay running in a child process (runChild).
type relayChild struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	done   chan struct{}
}

// startRelay runs this test binary again as a relay and waits until it
// has opened its table.
func startRelay(t *testing.T, pgURL, natsURL, table string) *relayChild {
	t.Helper()
	c := &relayChild{cmd: exec.Command(os.Args[0], "-test.run=^$"), done: make(chan struct{})}
	c.cmd.Env = append(os.Environ(), childPG+"="+pgURL, childNATS+"="+natsURL, childTable+"="+table)
	c.cmd.Stderr = &c.stderr
	c.cmd.WaitDelay = 5 * time.Second
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		s := bufio.NewScanner(out)
		ready <- s.Scan() && s.Text() == "ready"
		for s.Scan() {
		}
		_ = c.cmd.Wait()
		close(c.done)
	}()
	select {
	case ok := <-ready:
		if !ok {
			<-c.done
			t.Fatalf("relay child did not start: %v\n%s", c.cmd.ProcessState, c.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("relay child not ready within 30s")
	}
	return c
}

// kill sends SIGKILL and reaps the child; one that had exited on its own
// fails the test.
func (c *relayChild) kill(t *testing.T) {
	t.Helper()
	select {
	case <-c.done:
		t.Errorf("relay child exited on its own: %v\n%s", c.cmd.ProcessState, c.stderr.String())
		return
	default:
	}
	_ = c.cmd.Process.Kill()
	<-c.done
}

// TestRelayKill: callers commit 1,000 rows, each with its message
// (and roll back a fifth of their transactions), while relays in child
// processes are killed with SIGKILL and restarted and PostgreSQL is
// restarted, fast and immediate. Every committed row's message reaches
// the queue exactly once (by MessageID), and no message of a rolled-back
// transaction ever does.
func TestRelayKill(t *testing.T) {
	ctx := t.Context()
	pgURL := pg.NewDatabase(t)
	pool := poolOn(t, pgURL)
	broker, srv := newBroker(t)
	q, err := broker.OpenQueue(ctx, transport.QueueConfig{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	tbl := newOutbox(t, pool, broker)
	if _, err := pool.Exec(ctx, "CREATE TABLE orders (id text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}

	const relays, want = 3, 1000
	var live []*relayChild
	for range relays {
		live = append(live, startRelay(t, pgURL, srv.ClientURL(), tbl.Name()))
	}
	t.Cleanup(func() {
		for _, c := range live {
			c.kill(t)
		}
	})

	var (
		committed  atomic.Int64 // definite commits
		rolledBack sync.Map     // IDs of transactions rolled back on purpose
		next       atomic.Int64
		chaosDone  atomic.Bool
		wg         sync.WaitGroup
	)
	errRollback := errors.New("rolled back on purpose")
	for range 4 {
		wg.Go(func() {
			for !chaosDone.Load() || committed.Load() < want {
				if ctx.Err() != nil {
					return
				}
				n := next.Add(1)
				id := fmt.Sprintf("order-%d", n)
				rollback := n%5 == 0
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "INSERT INTO orders (id) VALUES ($1)", id); err != nil {
						return err
					}
					if _, err := tbl.Send(ctx, tx, "orders", &transport.Message{Body: []byte(id), MessageID: id}); err != nil {
						return err
					}
					if rollback {
						return errRollback
					}
					return nil
				})
				switch {
				case rollback && errors.Is(err, errRollback):
					rolledBack.Store(id, true)
				case err == nil:
					committed.Add(1)
				default: // the server restarting: the outcome may be unknown; the orders table tells
					select {
					case <-ctx.Done():
					case <-time.After(20 * time.Millisecond): // pace the retries while the server is down
					}
				}
			}
		})
	}

	// The chaos: kill a relay and start another, over and over; twice,
	// restart PostgreSQL, fast then immediate. Paced, so that callers
	// commit and relays relay in between.
	kills, restarts := 0, 0
	for i := range 12 {
		select {
		case <-ctx.Done():
			t.Fatal("test ended")
		case <-time.After(time.Duration(50+rand.IntN(150)) * time.Millisecond):
		}
		k := rand.IntN(len(live))
		live[k].kill(t)
		kills++
		if i == 4 || i == 9 {
			mode := pgtest.Fast
			if i == 9 {
				mode = pgtest.Immediate
			}
			if err := pg.Restart(ctx, mode); err != nil {
				t.Fatal(err)
			}
			restarts++
		}
		live[k] = startRelay(t, pgURL, srv.ClientURL(), tbl.Name())
	}
	chaosDone.Store(true)
	wg.Wait()
	t.Logf("%d commits (%d attempts), %d relay kills, %d PostgreSQL restarts", committed.Load(), next.Load(), kills, restarts)
	if committed.Load() < want {
		t.Fatalf("%d commits, want %d", committed.Load(), want)
	}

	// The rows committed, whatever their callers were told.
	var ids []string
	rows, err := pool.Query(ctx, "SELECT id FROM orders")
	if err != nil {
		t.Fatal(err)
	}
	ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	testutil.AwaitTrue(t, time.Minute, "the outbox relayed", func() bool { return pending(t, pool, tbl) == 0 })
	seen := map[string]int{}
	testutil.Await(t, time.Minute, func() string {
		clear(seen)
		total := 0
		for m, err := range q.Browse(ctx, 0) {
			if err != nil {
				return err.Error()
			}
			seen[m.MessageID]++
			total++
		}
		if total < len(ids) {
			return fmt.Sprintf("%d messages in the queue, %d rows committed", total, len(ids))
		}
		return ""
	})
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("committed %s: %d messages, want 1", id, seen[id])
		}
		delete(seen, id)
	}
	for id, n := range seen {
		_, rb := rolledBack.Load(id)
		t.Errorf("%d messages %s of no committed row (rolled back on purpose: %v)", n, id, rb)
	}
	var dead int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+tbl.Name()).Scan(&dead); err != nil || dead != 0 {
		t.Errorf("%d rows left in the outbox (%v), want 0", dead, err)
	}
}
