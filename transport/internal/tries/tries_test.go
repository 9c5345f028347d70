package tries

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Do asks again after an unanswered try or a transient answer, and stops
// at nil, at an answer that asking again cannot change, or once check
// fails.
func TestDo(t *testing.T) {
	errClosed := errors.New("closed")
	errPermanent := errors.New("permanent")
	tests := []struct {
		name      string
		answers   []error // f's answers in turn; nil ends the run
		unanswer  int     // the first this many tries wait out their limit
		check     error
		wantTries int
		wantErr   error
	}{
		{name: "answered", answers: []error{nil}, wantTries: 1},
		{name: "again, then answered", answers: []error{ErrAgain, ErrAgain, nil}, wantTries: 3},
		{name: "unanswered, then answered", answers: []error{nil, nil}, unanswer: 1, wantTries: 2},
		{name: "permanent", answers: []error{errPermanent, nil}, wantTries: 1, wantErr: errPermanent},
		{name: "closed", answers: []error{ErrAgain, nil}, check: errClosed, wantTries: 1, wantErr: ErrAgain},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Runner
			n := 0
			err := r.Do(t.Context(), func() error { return tt.check }, func(ctx context.Context) error {
				n++
				if n <= tt.unanswer {
					<-ctx.Done()
					return ctx.Err()
				}
				return tt.answers[n-1]
			})
			if !errors.Is(err, tt.wantErr) || err == nil && tt.wantErr != nil {
				t.Errorf("got %v, want %v", err, tt.wantErr)
			}
			if n != tt.wantTries {
				t.Errorf("got %d tries, want %d", n, tt.wantTries)
			}
		})
	}
}

// A slow answer raises the limit of a first try, up to maxTryLimit.
func TestFirstLimitFollowsAnswers(t *testing.T) {
	var r Runner
	if got := r.FirstLimit(); got != tryLimit {
		t.Errorf("at first: got %v, want %v", got, tryLimit)
	}
	for range 100 {
		r.noteAnswer(time.Second)
	}
	if got := r.FirstLimit(); got != maxTryLimit {
		t.Errorf("after slow answers: got %v, want %v", got, maxTryLimit)
	}
}

// An outcome still not settled when the caller's context ends is
// reported as that context's end: the caller knows what a timeout means
// (the write may or may not have been applied), not ErrAgain.
func TestDoNotSettledByDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	var r Runner
	err := r.Do(ctx, func() error { return nil }, func(context.Context) error {
		time.Sleep(5 * time.Millisecond) // an answer that takes a while
		return ErrAgain
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Do = %v, want an error matching %v", err, context.DeadlineExceeded)
	}
}
