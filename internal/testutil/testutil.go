// Package testutil holds the helpers jetsaga's tests share: awaiting a
// condition, running something until the test ends, a test logger, a
// buffer safe for concurrent writers, an embedded nats-server for one
// test, and golden files. It is for tests only.
package testutil

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport/embedded"
)

// pollEvery is how often Await asks its condition again.
const pollEvery = 10 * time.Millisecond

// Await asks cond until it returns "" (met) or within has passed, then
// fails the test with cond's last explanation. It also stops, failing,
// when the test's context ends.
func Await(t testing.TB, within time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v: %s", within, why)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("test ended while waiting: %s", why)
		case <-time.After(pollEvery):
		}
	}
}

// AwaitTrue is Await for a condition that holds or not: what names what
// the test waits for.
func AwaitTrue(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	Await(t, within, func() string {
		if cond() {
			return ""
		}
		return "waiting for " + what
	})
}

// RunUntilCleanup runs run in a goroutine until the test ends: the test's
// cleanup cancels run's context, waits for run to return, and fails the
// test if it returned an error. For a saga.Dispatcher: RunUntilCleanup(t, d.Run).
func RunUntilCleanup(t testing.TB, run func(context.Context) error) {
	t.Helper()
	ctx, stop := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
}

// Logger returns a logger for the code under test: it discards what it is
// given (fault tests are noisy by design), unless the environment variable
// JETSAGA_TEST_LOG is set, which sends it to stderr at debug level.
func Logger() *slog.Logger {
	if os.Getenv("JETSAGA_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// Buffer is a bytes.Buffer safe for concurrent use: what a program under
// test writes from several goroutines.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// ServerReady bounds the wait for an embedded nats-server to accept
// connections: more than embedded's 10 s default, for a loaded machine
// running tests with -race in parallel.
const ServerReady = time.Minute

// StartServer starts an embedded nats-server (loopback, a random port, a
// temporary store) for one test and shuts it down when the test ends.
// opts.ReadyTimeout defaults to ServerReady. A server that does not start
// fails the test: a skip would leave CI green with none of its tests run.
func StartServer(t testing.TB, opts embedded.Options) *embedded.Server {
	t.Helper()
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = ServerReady
	}
	srv, err := embedded.Start(opts)
	if err != nil {
		t.Fatalf("start an embedded nats-server (JetStream needs a writable temp dir and loopback networking): %v", err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}
