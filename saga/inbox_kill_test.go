package saga_test

// R15: a hot instance (hundreds of messages a second from several
// dispatcher processes) with a worker killed with SIGKILL mid-run: every
// message is applied to the saga's state once, also when its redelivery
// comes hundreds of steps on its instance after its first commit (the
// inbox once kept the last 128 only). The workers are this test binary
// run again as TestInboxKillWorkerHelper (see kill_test.go).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

const (
	r15WorkerEnv = "JETSAGA_R15_WORKER" // the NATS URL; set only in worker processes
	r15Queue     = "r15"
)

// r15Options: a lock of 5 s, in which a hot instance takes hundreds of
// steps before a killed worker's messages come back; conflicts (three
// processes on five instances) are retried rather than dead-lettered.
func r15Options() []saga.Option {
	return []saga.Option{
		saga.WithSagas(accountSaga()),
		saga.WithQueueConfig(transport.QueueConfig{Name: r15Queue, LockDuration: 5 * time.Second, MaxDeliveryCount: 30}),
		saga.WithConflictRetries(50),
		saga.WithRetry(saga.RetryPolicy{Immediate: 3, Delayed: 20, Backoff: func(int) time.Duration { return 100 * time.Millisecond }}),
		saga.WithDrainTimeout(3 * time.Second),
	}
}

// TestInboxKillWorkerHelper is a worker process of TestInboxKillHot. Run
// by go test, it returns at once.
func TestInboxKillWorkerHelper(t *testing.T) {
	url := os.Getenv(r15WorkerEnv)
	if url == "" {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		_, _ = os.Stdin.Read(make([]byte, 1)) // EOF: the parent stopped us, or died
		stop()
	}()
	n := newNode(t, url)
	hooks := saga.Hooks{StepDone: func(_ context.Context, info saga.StepInfo, res saga.StepResult) {
		fmt.Printf("R1STAT %s %d %d\n", res.Outcome, res.Conflicts, info.DeliveryCount)
	}}
	d := n.dispatcher(t, nil, r15Queue, append(r15Options(), saga.WithHooks(hooks))...)
	if err := d.Open(ctx); err != nil {
		t.Fatalf("open queue: %v", err)
	}
	fmt.Println("R1STAT ready 0 1")
	if err := d.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestInboxKillHot: 2,000 deposits to 5 accounts, handled by 3 worker
// processes; one is killed with SIGKILL once a quarter of them are
// handled (and replaced), another once half of them are. Every account's balance must be the sum of what was sent to
// it: a deposit applied twice would show above it.
func TestInboxKillHot(t *testing.T) {
	const accounts, deposits, workers = 5, 2000, 3
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 15))

	srv := startServer(t)
	n := newNode(t, srv.ClientURL())
	q := n.openQueue(t, transport.QueueConfig{Name: r15Queue, LockDuration: 5 * time.Second, MaxDeliveryCount: 30})
	d := n.dispatcher(t, nil, r15Queue, r15Options()...) // sends and reads state; never runs
	fleet := &r1Fleet{t: t, url: srv.ClientURL(), helper: "^TestInboxKillWorkerHelper$", env: r15WorkerEnv, stats: map[string]int{}}
	t.Cleanup(fleet.killAll)
	var ws []*r1Worker
	for range workers {
		ws = append(ws, fleet.start())
	}

	// The deposits go out while the workers handle them and die.
	ctx := t.Context()
	want := make(map[string]int)
	amounts := make([]int, deposits)
	for i := range amounts {
		amounts[i] = 1 + rng.IntN(100)
		want[fmt.Sprintf("acct-%d", i%accounts)] += amounts[i]
	}
	sent := make(chan error, 1)
	go func() {
		for i, amount := range amounts {
			if _, err := d.Send(ctx, Deposit{Account: fmt.Sprintf("acct-%d", i%accounts), Amount: amount}, saga.WithMessageID(fmt.Sprint("dep-", i))); err != nil {
				sent <- fmt.Errorf("send deposit %d: %w", i, err)
				return
			}
		}
		sent <- nil
	}()
	began := time.Now()
	// Two kills: at a quarter and at half of the deposits handled; the
	// first victim is replaced.
	for k, at := range []int{deposits / 4, deposits / 2} {
		testutil.AwaitTrue(t, 60*time.Second, fmt.Sprintf("%d deposits handled", at), func() bool {
			return fleet.counts()[string(saga.Handled)] >= at
		})
		victim := rng.IntN(len(ws))
		fleet.kill(ws[victim])
		t.Logf("killed worker %d after %d steps handled (%v)", ws[victim].n, fleet.counts()[string(saga.Handled)], time.Since(began).Round(time.Millisecond))
		ws = slices.Delete(ws, victim, victim+1)
		if k == 0 {
			ws = append(ws, fleet.start())
		}
	}

	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	// Every message settled, those the killed worker held after their
	// lock expired: nothing can be delivered again.
	testutil.Await(t, 120*time.Second, func() string { return queueEmpty(t, q) })
	for _, w := range ws {
		fleet.stop(w)
	}
	var diffs []string
	for i := range accounts {
		acct := fmt.Sprintf("acct-%d", i)
		s, _, ok := data[accountData](t, d, "account", acct)
		if !ok || s.Balance != want[acct] {
			diffs = append(diffs, fmt.Sprintf("%s: balance %d, sent %d (%+d)", acct, s.Balance, want[acct], s.Balance-want[acct]))
		}
	}
	s := fleet.counts()
	t.Logf("%d deposits to %d accounts in %v: %d handled (%d on a redelivery), %d duplicate (%d on a redelivery: committed before the kill), %d retried, %d dead-lettered; %d conflicts (%.1f runs a message)",
		deposits, accounts, time.Since(began).Round(time.Millisecond), s[string(saga.Handled)], s["redelivered "+string(saga.Handled)],
		s[string(saga.Duplicate)], s["redelivered "+string(saga.Duplicate)], s[string(saga.Retried)], s[string(saga.DeadLettered)],
		s["conflicts"], 1+float64(s["conflicts"])/float64(deposits))
	if len(diffs) > 0 {
		t.Errorf("a deposit applied twice or lost:\n%s", strings.Join(diffs, "\n"))
	}
}
