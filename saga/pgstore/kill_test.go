package pgstore_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// R1 with a business table: worker processes (this test binary again)
// run 200 account sagas whose every step writes business rows in the
// step's transaction; workers are killed with SIGKILL at random points,
// again and again. Every saga must reach its terminal state, and every
// business row exist exactly once and agree with it.

const workerEnv = "PGSTORE_WORKER"

const (
	r1Steps = 5                      // bookings per account
	r1Due   = 400 * time.Millisecond // the closing timeout, asked again until the bookings are done
)

func r1QueueConfig(name string) transport.QueueConfig {
	// A short lock, so that a killed worker's messages come back fast;
	// kills drive delivery counts up, hence more than the default 10.
	return transport.QueueConfig{Name: name, LockDuration: time.Second, MaxDeliveryCount: 30}
}

func r1Options(b *bank) []saga.Option {
	return []saga.Option{
		saga.WithQueueConfig(r1QueueConfig(b.queue)), saga.WithConflictRetries(100),
		saga.WithRetry(saga.RetryPolicy{Immediate: 3, Delayed: 5, Backoff: func(int) time.Duration { return 250 * time.Millisecond }}),
		saga.WithDrainTimeout(time.Second),
	}
}

// TestKillWorkers runs the workload; in a worker process (workerEnv set)
// it runs a dispatcher until it is killed.
func TestKillWorkers(t *testing.T) { killWorkers(t, "^TestKillWorkers$", "") }

// TestKillWorkersRiding is TestKillWorkers with workers whose updates
// outside steps — the writes that clear a step's outbox once its messages
// are sent — wait up to 50 ms to ride another step's commit (see
// pgstore's rides), at this workload's pace as under load: workers are
// killed while updates wait to ride, or ride.
func TestKillWorkersRiding(t *testing.T) { killWorkers(t, "^TestKillWorkersRiding$", "50ms") }

func killWorkers(t *testing.T, run, ride string) {
	if os.Getenv(workerEnv) != "" {
		store, b := childBank(t)
		b.chain, b.due = true, r1Due
		runDispatcher(t, natsBroker(t, os.Getenv(natsEnv)), store, b, r1Options(b)...)
		<-t.Context().Done() // until killed
		return
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	instances, cycles := 200, 8
	if testing.Short() {
		instances, cycles = 40, 3
	}
	ctx := t.Context()
	pool := sharedPool(t)
	store := newStore(t)
	b := newBank(t, pool)
	b.chain, b.steps, b.due = true, r1Steps, r1Due
	srv := testutil.StartServer(t, embedded.Options{})
	broker := natsBroker(t, srv.ClientURL())
	q, err := broker.OpenQueue(ctx, r1QueueConfig(b.queue))
	if err != nil {
		t.Fatal(err)
	}
	d, err := saga.NewDispatcher(broker, store, b.queue, append(r1Options(b), saga.WithSagas(b.saga()))...) // sends and reads; never runs
	if err != nil {
		t.Fatal(err)
	}
	start := func() *exec.Cmd {
		env := []string{workerEnv + "=1", natsEnv + "=" + srv.ClientURL(),
			tablesEnv + "=" + store.Table() + "," + b.prefix(), stepsEnv + "=" + strconv.Itoa(r1Steps)}
		if ride != "" {
			env = append(env, rideEnv+"="+ride)
		}
		cmd := childCommand(t, run, env...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	kill := func(cmd *exec.Cmd) {
		_ = cmd.Process.Kill() // SIGKILL
		_ = cmd.Wait()
	}
	ids := make([]string, instances)
	for i := range ids {
		ids[i] = fmt.Sprintf("acct-%03d", i)
	}
	var workers [2]*exec.Cmd
	kills := 0
	for c := range cycles {
		for i := range workers {
			if workers[i] == nil {
				workers[i] = start()
			}
		}
		life := time.Duration(300+rng.IntN(1200)) * time.Millisecond
		alive := time.Now()
		batch := ids[c*instances/cycles : (c+1)*instances/cycles]
		for j, id := range batch {
			if _, err := d.Send(ctx, AcctOpen{ID: id}, saga.WithMessageID("open-"+id)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Until(alive.Add(life * time.Duration(j+1) / time.Duration(len(batch))))) // the kill schedule, not a wait for a condition
		}
		victims := []int{rng.IntN(2)}
		if rng.IntN(3) == 0 {
			victims = []int{0, 1}
		}
		for _, i := range victims {
			kill(workers[i])
			workers[i] = nil
			kills++
		}
	}
	for i := range workers {
		if workers[i] == nil {
			workers[i] = start()
		}
	}
	testutil.Await(t, 90*time.Second, func() string {
		var open []string
		for _, id := range ids {
			if n := booked(t, d, id); n != -2 {
				open = append(open, fmt.Sprintf("%s (booked %d)", id, n))
			}
		}
		if len(open) > 0 {
			return fmt.Sprintf("%d of %d sagas not completed: %s", len(open), len(ids), strings.Join(open[:min(len(open), 10)], ", "))
		}
		return ""
	})
	bad := 0
	for _, id := range ids {
		a := b.account(t, pool, id)
		ok := a.status == "closed" && a.booked == r1Steps && len(a.ledger) == r1Steps
		for n := 1; n <= r1Steps; n++ {
			ok = ok && a.ledger[n] == 1
		}
		if !ok {
			if bad++; bad <= 10 {
				t.Errorf("%s: account %s, booked %d, ledger %v; want closed, %d, each booking once", id, a.status, a.booked, a.ledger, r1Steps)
			}
		}
	}
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+b.accounts).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != instances {
		t.Errorf("%d accounts, want %d", rows, instances)
	}
	if dl, err := q.DeadLetterQueue().Peek(ctx, 0, 1); err != nil {
		t.Fatal(err)
	} else if len(dl) > 0 {
		t.Errorf("dead-lettered: %s: %s", dl[0].DeadLetterReason, dl[0].DeadLetterDescription)
	}
	t.Logf("%d sagas, %d kills in %d cycles", instances, kills, cycles)
}
