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

const (
	runnerEnv        = "JETSAGA_SCHEDULE_RUNNER"         // the NATS URL; set only in runner processes
	runnerHorizonEnv = "JETSAGA_SCHEDULE_RUNNER_HORIZON" // the runner's WithHorizon, if set
)

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
	var opts []schedule.Option
	if h, err := time.ParseDuration(os.Getenv(runnerHorizonEnv)); err == nil {
		opts = append(opts, schedule.WithHorizon(h))
	}
	s, err := schedule.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Run(context.Background()) // until killed
}

func startRunner(t *testing.T, url string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillRunnerHelper$")
	cmd.Env = append(append(os.Environ(), runnerEnv+"="+url), env...)
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
	t.Parallel() // waits on real time: overlaps the package's other long waits
	if testing.Short() {
		t.Skip("40 s on a real server; run without -short")
	}
	srv, b := jetStream(t)
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

	arr := collect(ctx, work)

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
		if got := arr.distinct(); got < n {
			return "occurrences received: " + strconv.Itoa(got) + " of " + strconv.Itoa(n)
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
	arr.check(t, "every-second", start, n)
	info, err := s.Get(ctx, "every-second")
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	t.Logf("sent %d, late %d, skipped %d", info.Sent, info.Late, info.Skipped)
}

// A schedule every second under CatchUpSkip, planned 30 s ahead (the
// least horizon), its runner killed with SIGKILL every 5 s for a minute
// and started again at once: the occurrences are planned as scheduled
// messages on the target, so no kill delays one — none is skipped, none
// sent twice, none early, and the record counts them all as sent.
func TestRunnerKilledEveryFiveSeconds(t *testing.T) {
	t.Parallel() // waits on real time: overlaps the package's other long waits
	if testing.Short() {
		t.Skip("90 s on a real server; run without -short")
	}
	srv, b := jetStream(t)
	ctx := t.Context()
	s, err := schedule.New(b, schedule.WithHorizon(schedule.MinHorizon))
	if err != nil {
		t.Fatal(err)
	}
	work, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "work"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 80 // the last 20 after the kills
	start := time.Now().Truncate(time.Second).Add(3 * time.Second)
	end := start.Add((n - 1) * time.Second)
	if err := s.Create(ctx, schedule.Schedule{
		Name: "every-second", Spec: schedule.Spec{Every: time.Second}, Start: start, End: end,
		CatchUp: schedule.CatchUp{Policy: schedule.CatchUpSkip},
		Action:  schedule.Action{Queue: "work", Message: &transport.Message{Subject: "Tick"}},
	}); err != nil {
		t.Fatal(err)
	}
	arr := collect(ctx, work)
	horizon := runnerHorizonEnv + "=" + schedule.MinHorizon.String()
	runner := startRunner(t, srv.ClientURL(), horizon)
	for k := 1; k <= 12; k++ {
		sleepUntil(start.Add(time.Duration(5*k)*time.Second - 1700*time.Millisecond))
		kill(t, runner)
		runner = startRunner(t, srv.ClientURL(), horizon)
	}
	testutil.Await(t, 40*time.Second, func() string {
		if got := arr.distinct(); got < n {
			return "occurrences received: " + strconv.Itoa(got) + " of " + strconv.Itoa(n)
		}
		if info, err := s.Get(ctx, "every-second"); err != nil || !info.Ended {
			return "schedule not ended"
		}
		return ""
	})
	arr.check(t, "every-second", start, n)
	info, err := s.Get(ctx, "every-second")
	if err != nil {
		t.Fatal(err)
	}
	if info.Sent != n || info.Skipped != 0 {
		t.Errorf("sent %d skipped %d late %d, want %d sent, none skipped", info.Sent, info.Skipped, info.Late, n)
	}
}

// jetStream starts an embedded nats-server for t and returns it with a
// broker on it whose connection reconnects forever.
func jetStream(t *testing.T) (*embedded.Server, *transport.Broker) {
	t.Helper()
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
	return srv, b
}

// consume passes every message of q to f and completes it, until ctx
// ends; a receive that fails (the server restarts) is tried again.
func consume(ctx context.Context, q *transport.Queue, f func(*transport.Message)) {
	go func() {
		for ctx.Err() == nil {
			ds, err := q.Receive(ctx, 64)
			if err != nil {
				continue
			}
			for _, d := range ds {
				f(d.Message)
				_ = d.Complete(ctx)
			}
		}
	}()
}

// arrivals records the occurrences a queue receives, by MessageID, and
// those enqueued before their nominal time.
type arrivals struct {
	mu    sync.Mutex
	got   map[string]int
	early []string
}

func collect(ctx context.Context, q *transport.Queue) *arrivals {
	a := &arrivals{got: map[string]int{}}
	consume(ctx, q, func(m *transport.Message) {
		nominal, _ := time.Parse(time.RFC3339Nano, m.Properties[schedule.PropertyNominal])
		a.mu.Lock()
		defer a.mu.Unlock()
		a.got[m.MessageID]++
		if m.EnqueuedAt.Before(nominal) {
			a.early = append(a.early, m.MessageID)
		}
	})
	return a
}

func (a *arrivals) distinct() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.got)
}

// check fails t unless the n occurrences of the schedule name every
// second from start arrived once each, nothing else did, and none early.
func (a *arrivals) check(t *testing.T, name string, start time.Time, n int) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range n {
		id := schedule.OccurrenceID(name, start.Add(time.Duration(i)*time.Second))
		if a.got[id] != 1 {
			t.Errorf("occurrence %s received %d times, want once", id, a.got[id])
		}
	}
	if len(a.got) != n {
		t.Errorf("received %d distinct occurrences, want %d: %v", len(a.got), n, a.got)
	}
	if len(a.early) > 0 {
		t.Errorf("occurrences enqueued before their nominal time: %v", a.early)
	}
}
