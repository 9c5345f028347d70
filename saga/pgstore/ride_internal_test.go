package pgstore

import (
	"context"
	"testing"
	"time"
)

// TestRideWaitFollowsTheCommits: an update waits to ride about twice the
// average time between commits, and not at all when commits are further
// apart than half the longest wait, nor while some of the pool's
// connections are not in a step's transaction and no step waits for one.
func TestRideWaitFollowsTheCommits(t *testing.T) {
	for _, tc := range []struct {
		name      string
		open      int // of 4 connections
		queued    int // steps waiting for one
		gap       time.Duration
		wantWaits bool
	}{
		{name: "commits close together", open: 4, gap: 20 * time.Second, wantWaits: true},
		{name: "commits far apart", open: 4, gap: 40 * time.Second},
		{name: "no step open", gap: 20 * time.Second},
		{name: "a connection not in a step", open: 3, gap: 20 * time.Second},
		{name: "steps waiting for a connection", open: 3, queued: 1, gap: 20 * time.Second, wantWaits: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Scaled up (a minute for rideWait) so that a slow machine does not
			// make the wait run out.
			r := &rides{max: time.Minute, busy: 4, open: tc.open, queued: tc.queued, last: time.Now(), gap: tc.gap}
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
