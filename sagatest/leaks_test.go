package sagatest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
)

type (
	started struct{ ID string }
	later   struct{}
	stray   struct{}
)

func waiting() *saga.Definition[struct{}] {
	d := saga.Define[struct{}]("waiting")
	saga.StartedBy(d, saga.By(func(m started) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[struct{}], _ started) error {
			_, err := c.RequestTimeout(time.Hour, later{})
			return err
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[struct{}], _ later) error { return nil })
	return d
}

// The checks Run makes when the test returns.
func TestLeaks(t *testing.T) {
	Run(t, []saga.Saga{waiting()}, func(t *testing.T, env *Env) {
		env.Send(started{ID: "w-1"})
		if got := env.leaks(); len(got) != 0 {
			t.Errorf("a saga waiting for its timeout: got leaks %q, want none", got)
		}

		env.Send(stray{})
		got := strings.Join(env.leaks(), "\n")
		if want := "1 message(s) dead-lettered, which the test did not look at (Env.DeadLetters):\n" +
			`  sagatest.stray at +0s: UnknownMessageType: saga: unknown message type: "sagatest.stray" (during Env.Send at leaks_test.go:37)`; got != want {
			t.Errorf("after a dead letter: got leaks %q, want %q", got, want)
		}
		env.DeadLetters()
		if got := env.leaks(); len(got) != 0 {
			t.Errorf("after DeadLetters: got leaks %q, want none", got)
		}

		// Lose the instance behind the dispatcher's back: its timeout is
		// left in the queue.
		ctx := context.Background()
		key := env.store.Keys()[0]
		_, rev, err := env.store.Load(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := env.store.Delete(ctx, key, rev); err != nil {
			t.Fatal(err)
		}
		got = strings.Join(env.leaks(), "\n")
		if want := "timeout sagatest.later of waiting/w-1 still scheduled for +1h0m0s, but the instance does not exist"; got != want {
			t.Errorf("after losing the instance: got leaks %q, want %q", got, want)
		}
		env.Advance(time.Hour) // the timeout fires and is dropped
		if got := env.leaks(); len(got) != 0 {
			t.Errorf("after the timeout fired: got leaks %q, want none", got)
		}
	})
}

func TestFormatOffset(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{0, "+0s"},
		{5 * time.Minute, "+5m0s"},
		{14 * 24 * time.Hour, "+14d"},
		{14*24*time.Hour + 2*time.Hour, "+14d2h0m0s"},
		{-time.Second, "-1s"},
	} {
		if got := formatOffset(tt.d); got != tt.want {
			t.Errorf("formatOffset(%v): got %q, want %q", tt.d, got, tt.want)
		}
	}
}
