package tries

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	// tryLimit is the limit of a first try when the server answers
	// promptly; maxTryLimit bounds every try.
	tryLimit    = 250 * time.Millisecond
	maxTryLimit = 2 * time.Second
	// backoff is the wait before asking again after a quick answer
	// saying "no leader" (it grows with each try, up to 8 times).
	backoff = 20 * time.Millisecond
)

// Runner makes requests in bounded tries and keeps the recent answer
// time, which sets the limit of a first try. Its zero value is ready to
// use; one serves every request of a broker.
type Runner struct {
	answerTime atomic.Int64 // recent answer time of a try, in ns
}

// FirstLimit is the limit of an operation's first try: tryLimit, or four
// times the recent answer time when the server answers slowly (a loaded
// machine), so that slow answers are waited for rather than asked for
// again, which would only load the server more. Up to maxTryLimit.
func (r *Runner) FirstLimit() time.Duration {
	return min(max(tryLimit, 4*time.Duration(r.answerTime.Load())), maxTryLimit)
}

// noteAnswer folds the time an answered try took into the recent answer
// time (an exponentially weighted average, weight 1/8).
func (r *Runner) noteAnswer(took time.Duration) {
	for {
		old := r.answerTime.Load()
		next := old + (int64(took)-old)/8
		if r.answerTime.CompareAndSwap(old, next) {
			return
		}
	}
}

// ErrAgain asks Do for another try: the outcome of an earlier one is not
// settled yet.
var ErrAgain = errors.New("transport: outcome not settled yet; asking again")

// Do calls f with a context bounded by the current try limit until f
// returns nil or an error that asking again cannot change, ctx ends, or
// check returns an error (the broker closed). f learns whether an earlier
// try went unanswered from its own state.
func (r *Runner) Do(ctx context.Context, check func() error, f func(ctx context.Context) error) error {
	limit := r.FirstLimit()
	var noResponders time.Time // since when requests have met no responders
	for try := 0; ; try++ {
		tctx, cancel := context.WithTimeout(ctx, limit)
		began := time.Now()
		err := f(tctx)
		unanswered := err != nil && tctx.Err() != nil
		cancel()
		if !unanswered {
			r.noteAnswer(time.Since(began))
		}
		if err == nil || ctx.Err() != nil || check() != nil || !unanswered && !transient(err) {
			return ended(ctx, err)
		}
		if NoResponders(err) {
			// As during an election; but also what a deleted stream
			// answers, so not for long.
			if noResponders.IsZero() {
				noResponders = time.Now()
			} else if time.Since(noResponders) > noRespondersPatience {
				return err
			}
		}
		if !unanswered {
			select {
			case <-ctx.Done():
				return ended(ctx, err)
			case <-time.After(backoff << min(try, 3)):
			}
		}
		limit = min(2*limit, maxTryLimit)
	}
}

// ended returns err, the last try's, as Do's error; an outcome not
// settled when ctx ended is said in terms the caller knows: ctx's end
// (the outcome is unknown, as after a timeout).
func ended(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ErrAgain) {
		return fmt.Errorf("%w: %w", context.Cause(ctx), err)
	}
	return err
}

// noRespondersPatience is how long Do asks again while requests meet no
// responders.
const noRespondersPatience = 2 * time.Second

// NoResponders reports whether err says that no server answered: as
// during an election, or from a deleted stream.
func NoResponders(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// transient reports whether err says only that the stream (or consumer)
// cannot answer yet: no leader, no responders.
func transient(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, ErrAgain) || NoResponders(err) || errors.Is(err, nats.ErrTimeout) ||
		errors.As(err, &apiErr) && (apiErr.ErrorCode == errClusterNotAvail || apiErr.ErrorCode == errClusterNotLeader)
}

// nats-server's error codes for "JetStream system temporarily
// unavailable" (no leader known) and "not leader".
const (
	errClusterNotAvail  jetstream.ErrorCode = 10008
	errClusterNotLeader jetstream.ErrorCode = 10009
)
