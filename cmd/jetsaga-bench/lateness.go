package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/timeout"
)

// P3: timeouts due at evenly spaced instants over -spread, received as they
// fire. Lateness is measured twice: the broker's (EnqueuedAt − due) and
// end to end (time of receipt − due). Server and client share one clock.
// Then the same due times as saga timeouts (lateness_saga.go), as their
// handlers see them (handler start − due): with default options (early
// activation, issue 25), with WithEarlyActivation(0) (the old default) as
// its baseline in the same run, and with -lead if given, each beside the
// raw receiver's end to end.

// publishers bounds the concurrency of scheduling the timeouts.
const publishers = 16

func benchLateness(ctx context.Context, e *env) ([]Result, error) {
	n := e.scaled(latenessCount)
	e.progress("  jetsaga: %d timeouts over %v", n, e.cfg.spread)
	jet, err := latenessJetsaga(ctx, e, n)
	if err != nil {
		return nil, fmt.Errorf("jetsaga: %w", err)
	}
	e.progress("  raw: %d timeouts over %v", n, e.cfg.spread)
	raw, err := latenessRaw(ctx, e, n)
	if err != nil {
		return nil, fmt.Errorf("raw: %w", err)
	}
	e.progress("  saga, default options: %d timeouts over %v", n, e.cfg.spread)
	sagaDef, err := latenessSaga(ctx, e, n, lateRound{lead: timeout.DefaultEarlyActivation})
	if err != nil {
		return nil, fmt.Errorf("saga: %w", err)
	}
	e.progress("  saga, WithEarlyActivation(0): %d timeouts over %v", n, e.cfg.spread)
	sagaOld, err := latenessSaga(ctx, e, n, lateRound{opts: []timeout.QueueOption{timeout.WithEarlyActivation(0)}})
	if err != nil {
		return nil, fmt.Errorf("saga, WithEarlyActivation(0): %w", err)
	}
	e.charts.lateness = &latenessChart{n: n, spread: e.cfg.spread, jet: jet.e2e, raw: raw.e2e, jetEnq: jet.broker, rawEq: raw.broker}
	const maxP99, target = 300 * time.Millisecond, "p99 <= 300ms, 0 early"
	const maxDefP99, defTarget = 20 * time.Millisecond, "p99 <= 20ms, 0 early (P3)"
	jb, rb := jet.summary(n, jet.broker), raw.summary(n, raw.broker)
	je, re := jet.summary(n, jet.e2e), raw.summary(n, raw.e2e)
	sd, so := sagaDef.summary(n, sagaDef.e2e), sagaOld.summary(n, sagaOld.e2e)
	out := []Result{
		latencyResult("lateness", fmt.Sprintf("lateness enqueued-due (%d over %v)", n, e.cfg.spread), jb, rb, maxP99, target),
		latencyResult("lateness", "lateness received-due", je, re, maxP99, target),
		latencyResult("lateness", "  of which received-enqueued", summarize(jet.lag), summarize(raw.lag), 0, ""),
		{
			Bench:   "lateness",
			Label:   "lateness received-due: min, counts",
			Jetsaga: Figure{Text: jet.counts(je)},
			Raw:     &Figure{Text: raw.counts(re)},
			Target:  "min >= 0, 0 early, 0 lost",
			Pass:    verdict(je.Early == 0 && jb.Early == 0 && je.Missing == 0),
		},
		latencyResult("lateness", fmt.Sprintf("saga handler-due, default options (lead %v)", timeout.DefaultEarlyActivation), sd, re, maxDefP99, defTarget),
		{
			Bench:   "lateness",
			Label:   "  min, counts",
			Jetsaga: Figure{Text: sagaDef.counts(sd) + fmt.Sprintf(", %d activated after due", sagaDef.activatedLate())},
			Target:  "min >= 0, 0 early, 0 lost",
			Pass:    verdict(sd.Early == 0 && sd.Missing == 0),
		},
		latencyResult("lateness", "saga handler-due, WithEarlyActivation(0)", so, re, maxP99, target),
		{
			Bench:   "lateness",
			Label:   "  min, counts",
			Jetsaga: Figure{Text: sagaOld.counts(so)},
			Target:  "min >= 0, 0 early, 0 lost",
			Pass:    verdict(so.Early == 0 && so.Missing == 0),
		},
		{
			Bench:   "lateness",
			Label:   "saga handler p99: default options vs WithEarlyActivation(0)",
			Jetsaga: Figure{Text: fmt.Sprintf("%s vs %s", fmtDur(sd.P99), fmtDur(so.P99))},
			Ratio:   ratioOf(sd.P99, so.P99),
		},
	}
	if lead := e.cfg.lead; lead > 0 && lead != timeout.DefaultEarlyActivation {
		e.progress("  saga, early activation %v: %d timeouts over %v", lead, n, e.cfg.spread)
		sagaLead, err := latenessSaga(ctx, e, n, lateRound{lead: lead, opts: []timeout.QueueOption{timeout.WithEarlyActivation(lead)}})
		if err != nil {
			return nil, fmt.Errorf("saga, early activation %v: %w", lead, err)
		}
		sl := sagaLead.summary(n, sagaLead.e2e)
		out = append(out,
			latencyResult("lateness", fmt.Sprintf("saga handler-due, early activation %v", lead), sl, re, maxDefP99, defTarget),
			Result{
				Bench:   "lateness",
				Label:   "  min, counts",
				Jetsaga: Figure{Text: sagaLead.counts(sl) + fmt.Sprintf(", %d activated after due", sagaLead.activatedLate())},
				Target:  "min >= 0, 0 early, 0 lost",
				Pass:    verdict(sl.Early == 0 && sl.Missing == 0),
			})
	}
	return out, nil
}

func ratioOf(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// firings collects what a receiver saw.
type firings struct {
	mu      sync.Mutex
	seen    map[string]bool
	dups    int
	broker  []time.Duration // enqueued - due
	e2e     []time.Duration // received - due
	lag     []time.Duration // received - enqueued
	dues    []time.Time     // due, in the order of e2e
	lastAt  time.Time       // the latest received
	pubLate atomic.Int64    // schedules whose publish returned after their due time
}

func newFirings(n int) *firings {
	return &firings{seen: make(map[string]bool, n)}
}

// add records one activation and reports whether all n have arrived.
func (f *firings) add(n int, id string, due, enqueued, received time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen[id] {
		f.dups++
		return len(f.seen) >= n
	}
	f.seen[id] = true
	f.broker = append(f.broker, enqueued.Sub(due))
	f.e2e = append(f.e2e, received.Sub(due))
	f.lag = append(f.lag, received.Sub(enqueued))
	f.dues = append(f.dues, due)
	if received.After(f.lastAt) {
		f.lastAt = received
	}
	return len(f.seen) >= n
}

// last returns the time the latest activation was received.
func (f *firings) last() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastAt
}

// bySecond returns the p99 of received − due of the firings due in each
// second from t0 (the first due in [t0, t0+1s), and so on), up to the
// last second with any.
func (f *firings) bySecond(t0 time.Time) []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	var secs [][]time.Duration
	for i, due := range f.dues {
		s := max(0, int(due.Sub(t0)/time.Second))
		for len(secs) <= s {
			secs = append(secs, nil)
		}
		secs[s] = append(secs[s], f.e2e[i])
	}
	out := make([]time.Duration, len(secs))
	for i, ds := range secs {
		slices.Sort(ds)
		out[i] = percentile(ds, 99)
	}
	return out
}

func (f *firings) summary(n int, ds []time.Duration) *Latency {
	l := summarize(ds)
	l.Missing = n - l.Count
	return l
}

// activatedLate counts the firings activated after their due time.
func (f *firings) activatedLate() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, d := range f.broker {
		if d > 0 {
			n++
		}
	}
	return n
}

func (f *firings) counts(l *Latency) string {
	s := fmt.Sprintf("min %s, %d early, %d lost, %d dup", fmtDur(l.Min), l.Early, l.Missing, f.dups)
	if late := f.pubLate.Load(); late > 0 {
		s += fmt.Sprintf(" (%d published after due)", late)
	}
	return s
}

// dueTimes spaces n due times evenly over spread, starting far enough
// ahead that publishing them all does not overtake the first.
func dueTimes(n int, spread time.Duration) []time.Time {
	lead := max(time.Second, time.Duration(n)*100*time.Microsecond)
	start := time.Now().Add(lead)
	due := make([]time.Time, n)
	for i := range due {
		due[i] = start.Add(time.Duration(i) * spread / time.Duration(n))
	}
	return due
}

// fire schedules every due time with publish(i), in order, and runs
// receive until it returns; receive must stop once all n have arrived.
func fire(ctx context.Context, due []time.Time, f *firings,
	publish func(ctx context.Context, i int) error, receive func(ctx context.Context) error,
) error {
	ctx, cancel := context.WithDeadline(ctx, due[len(due)-1].Add(30*time.Second))
	defer cancel()
	recvErr := make(chan error, 1)
	go func() { recvErr <- receive(ctx) }()
	err := parallel(publishers, len(due), func(i int) error {
		if err := publish(ctx, i); err != nil {
			return err
		}
		if time.Now().After(due[i]) {
			f.pubLate.Add(1)
		}
		return nil
	})
	if err != nil {
		cancel()
		<-recvErr
		return fmt.Errorf("scheduling: %w", err)
	}
	if err := <-recvErr; err != nil {
		f.mu.Lock()
		defer f.mu.Unlock()
		return fmt.Errorf("receiving (%d of %d arrived): %w", len(f.seen), len(due), err)
	}
	return nil
}

func latenessJetsaga(ctx context.Context, e *env, n int) (*firings, error) {
	q, drop, err := e.openQueue(ctx, "late")
	if err != nil {
		return nil, err
	}
	defer drop()
	f := newFirings(n)
	due := dueTimes(n, e.cfg.spread)
	publish := func(ctx context.Context, i int) error {
		_, err := q.Schedule(ctx, jetMessage(strconv.Itoa(i)), due[i])
		return err
	}
	receive := func(ctx context.Context) error {
		for {
			ds, err := q.Receive(ctx, 100)
			if err != nil {
				return err
			}
			now := time.Now()
			done := false
			for _, d := range ds {
				done = f.add(n, d.MessageID, d.ScheduledAt, d.EnqueuedAt, now)
				if err := d.Complete(ctx); err != nil {
					return err
				}
			}
			if done {
				return nil
			}
		}
	}
	return f, fire(ctx, due, f, publish, receive)
}

// latenessRaw schedules the same messages into one stream whose schedules
// target a subject of that stream, and receives the activations with a
// continuously pulling consumer.
func latenessRaw(ctx context.Context, e *env, n int) (*firings, error) {
	rawStream, rawPrefix := rawNames("S", "late")
	s, err := e.rawScheduleStream(ctx, rawStream, rawPrefix)
	if err != nil {
		return nil, err
	}
	defer e.dropStream(ctx, rawStream)
	cons, err := s.CreateOrUpdateConsumer(ctx, recvConsumer(rawPrefix+".f.m"))
	if err != nil {
		return nil, err
	}
	f := newFirings(n)
	due := dueTimes(n, e.cfg.spread)
	publish := func(ctx context.Context, i int) error {
		_, err := e.js.PublishMsg(ctx, rawScheduleMsg(rawPrefix, strconv.Itoa(i), due[i]))
		return err
	}
	receive := func(ctx context.Context) error {
		it, err := cons.Messages(jetstream.PullMaxMessages(100))
		if err != nil {
			return err
		}
		defer it.Stop()
		for {
			m, err := it.Next(jetstream.NextContext(ctx))
			if err != nil {
				return err
			}
			now := time.Now()
			md, err := m.Metadata()
			if err != nil {
				return err
			}
			at, err := time.Parse(time.RFC3339Nano, m.Headers().Get(hdrScheduledAt))
			if err != nil {
				return errors.Join(errors.New("activation without due time"), err)
			}
			done := f.add(n, m.Headers().Get(hdrMessageID), at, md.Timestamp, now)
			if err := m.DoubleAck(ctx); err != nil {
				return err
			}
			if done {
				return nil
			}
		}
	}
	return f, fire(ctx, due, f, publish, receive)
}
