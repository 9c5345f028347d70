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

// childEnv marks the child process of a test whose failure is the point.
const childEnv = "TESTUTIL_CHILD"

// failingChild runs t's test again in a child process, with childEnv
// set, and fails t unless the child fails saying want.
func failingChild(t *testing.T, want string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^"+t.Name()+"$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), want) {
		t.Fatalf("want the child to fail saying %q: err %v, output:\n%s", want, err, out)
	}
}

// Await fails a test whose condition is never met, with the last
// explanation.
func TestAwaitFailsWithTheLastExplanation(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		AwaitTrue(t, 50*time.Millisecond, "the moon", func() bool { return false })
		return
	}
	failingChild(t, "condition not met within 50ms: waiting for the moon")
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

// RunUntilCleanup fails the test when run returns an error.
func TestRunUntilCleanupFailsOnAnError(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		RunUntilCleanup(t, func(ctx context.Context) error {
			<-ctx.Done()
			return errors.New("the moon fell")
		})
		return
	}
	failingChild(t, "run: the moon fell")
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
