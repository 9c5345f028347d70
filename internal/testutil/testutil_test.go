package testutil

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport/embedded"
)

func TestAwaitReturnsOnceMet(t *testing.T) {
	n := 0
	Await(t, time.Second, func() string {
		if n++; n < 3 {
			return fmt.Sprintf("asked %d times", n)
		}
		return ""
	})
	if n != 3 {
		t.Fatalf("cond asked %d times, want 3", n)
	}
}

// Await fails a test whose condition is never met, with the last
// explanation: run in a child process, since the failure is the point.
func TestAwaitFailsWithTheLastExplanation(t *testing.T) {
	if os.Getenv("TESTUTIL_AWAIT_CHILD") != "" {
		AwaitTrue(t, 50*time.Millisecond, "the moon", func() bool { return false })
		return
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestAwaitFailsWithTheLastExplanation$")
	cmd.Env = append(os.Environ(), "TESTUTIL_AWAIT_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "condition not met within 50ms: waiting for the moon") {
		t.Fatalf("Await on a condition never met: err %v, output:\n%s", err, out)
	}
}

func TestRunUntilCleanup(t *testing.T) {
	var stopped atomic.Bool
	t.Run("run", func(t *testing.T) {
		RunUntilCleanup(t, func(ctx context.Context) error {
			<-ctx.Done()
			stopped.Store(true)
			return nil
		})
	})
	if !stopped.Load() {
		t.Fatal("run did not return by the end of the test that started it")
	}
}

// RunUntilCleanup fails the test when run returns an error: run in a
// child process, since the failure is the point.
func TestRunUntilCleanupFailsOnAnError(t *testing.T) {
	if os.Getenv("TESTUTIL_RUN_CHILD") != "" {
		RunUntilCleanup(t, func(ctx context.Context) error {
			<-ctx.Done()
			return errors.New("the moon fell")
		})
		return
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestRunUntilCleanupFailsOnAnError$")
	cmd.Env = append(os.Environ(), "TESTUTIL_RUN_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "run: the moon fell") {
		t.Fatalf("RunUntilCleanup of a run that fails: err %v, output:\n%s", err, out)
	}
}

func TestBufferConcurrentWrites(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				fmt.Fprint(&b, "x")
			}
		})
	}
	wg.Wait()
	if n := len(b.String()); n != 800 {
		t.Fatalf("%d bytes written, want 800", n)
	}
}

func TestStartServer(t *testing.T) {
	srv := StartServer(t, embedded.Options{})
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if !nc.IsConnected() {
		t.Fatal("not connected")
	}
}
