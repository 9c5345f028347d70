package pgstore

import (
	"context"
	"testing"
	"time"
)

// TestRideWaitFollowsTheCommits: an update waits to ride about twice the
// average time between commits, and not at all when commits are further
// apart than half the longest wait (a dispatcher with few steps in
// flight), nor when no step's transaction is open.
func TestRideWaitFollowsTheCommits(t *testing.T) {
	for _, tc := range []struct {
		name      string
		open      int
		gap       time.Duration
		wantWaits bool
	}{
		{name: "commits close together", open: 1, gap: 20 * time.Second, wantWaits: true},
		{name: "commits far apart", open: 1, gap: 40 * time.Second},
		{name: "no step open", gap: 20 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Scaled up (a minute for rideWait) so that a slow machine does not
			// make the wait run out.
			r := &rides{max: time.Minute, open: tc.open, last: time.Now(), gap: tc.gap}
			x := &rider{key: "k"}
			done := make(chan bool, 1)
			go func() {
				_, ok := r.ride(context.Background(), x)
				done <- ok
			}()
			if !tc.wantWaits {
				// At once: well before the wait it would have (40 s or more).
				select {
				case ok := <-done:
					if ok {
						t.Fatal("rode, with no commit to ride")
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the update waited to ride")
				}
				return
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				r.mu.Lock()
				n := len(r.waiting)
				r.mu.Unlock()
				if n == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the update did not wait to ride")
				}
				time.Sleep(10 * time.Microsecond) // polls the condition
			}
			if took := r.take(""); len(took) == 1 {
				answer(took, map[string]int64{"k": 7})
			}
			if ok := <-done; !ok {
				t.Error("the update waited, but did not ride the commit that took it")
			}
		})
	}
}
