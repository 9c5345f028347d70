package schedule_test

// R13 on a real embedded nats-server: a schedule every second for 40 s,
// its runner (this test binary run again as TestKillRunnerHelper) killed
// with SIGKILL twice and the server restarted once. Every nominal
// occurrence must reach the target queue exactly once (catch-up policy:
// fire all), never before its nominal time, with contiguous occurrence IDs.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/timeout/schedule"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

const runnerEnv = "JETSAGA_SCHEDULE_RUNNER" // the NATS URL; set only in runner processes

// TestKillRunnerHelper is the runner process of TestRunnerKilled; in a
// normal run it returns at once.
func TestKillRunnerHelper(t *testing.T) {
	url := os.Getenv(runnerEnv)
	if url == "" {
		return
	}
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	b, err := transport.NewJetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := schedule.New(b)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Run(context.Background()) // until killed
}

func startRunner(t *testing.T, url string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillRunnerHelper$")
	cmd.Env = append(os.Environ(), runnerEnv+"="+url)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func kill(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

func TestRunnerKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("40 s on a real server; run without -short")
	}
	srv := testutil.StartServer(t, embedded.Options{})
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b, err := transport.NewJetStream(nc, transport.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	s, err := schedule.New(b)
	if err != nil {
		t.Fatal(err)
	}
	work, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "work"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	start := time.Now().Truncate(time.Second).Add(3 * time.Second)
	end := start.Add((n - 1) * time.Second)
	if err := s.Create(ctx, schedule.Schedule{
		Name: "every-second", Spec: schedule.Spec{Every: time.Second}, Start: start, End: end,
		Action: schedule.Action{Queue: "work", Message: &transport.Message{Subject: "Tick"}},
	}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	got := map[string]int{}
	var early []string
	go func() {
		for ctx.Err() == nil {
			ds, err := work.Receive(ctx, 64)
			if err != nil {
				continue // the server restarts
			}
			for _, d := range ds {
				nominal, _ := time.Parse(time.RFC3339Nano, d.Properties[schedule.PropertyNominal])
				mu.Lock()
				got[d.MessageID]++
				if d.EnqueuedAt.Before(nominal) {
					early = append(early, d.MessageID)
				}
				mu.Unlock()
				_ = d.Complete(ctx)
			}
		}
	}()

	a := startRunner(t, srv.ClientURL())
	sleepUntil(start.Add(8*time.Second + 300*time.Millisecond))
	kill(t, a) // first kill
	sleepUntil(start.Add(11 * time.Second))
	bRunner := startRunner(t, srv.ClientURL())
	sleepUntil(start.Add(18 * time.Second))
	if err := srv.Restart(); err != nil { // the server restarts once
		t.Fatal(err)
	}
	sleepUntil(start.Add(26*time.Second + 700*time.Millisecond))
	kill(t, bRunner) // second kill
	sleepUntil(start.Add(29 * time.Second))
	startRunner(t, srv.ClientURL())

	testutil.Await(t, 30*time.Second, func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(got) < n {
			return "occurrences received: " + strconv.Itoa(len(got)) + " of " + strconv.Itoa(n)
		}
		return ""
	})
	testutil.Await(t, 10*time.Second, func() string {
		info, err := s.Get(ctx, "every-second")
		if err != nil {
			return err.Error()
		}
		if !info.Ended {
			return "schedule not ended"
		}
		return ""
	})
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		id := schedule.OccurrenceID("every-second", start.Add(time.Duration(i)*time.Second))
		if got[id] != 1 {
			t.Errorf("occurrence %s received %d times, want once", id, got[id])
		}
	}
	if len(got) != n {
		t.Errorf("received %d distinct occurrences, want %d: %v", len(got), n, got)
	}
	if len(early) > 0 {
		t.Errorf("occurrences enqueued before their nominal time: %v", early)
	}
	info, err := s.Get(ctx, "every-second")
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	t.Logf("sent %d, late %d, skipped %d", info.Sent, info.Late, info.Skipped)
}
