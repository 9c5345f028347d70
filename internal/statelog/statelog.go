// Package statelog logs the failures of a call that a long-running loop
// retries once per change of state — the first failure at Warn, the call
// working again at Info with how long it failed — instead of a line per
// retry through an outage.
package statelog

import (
	"context"
	"log/slog"
	"time"
)

// Failures follows one retried call (a receive, a relay pass). Its zero
// value is not usable: set Logger and What. It is not safe for concurrent
// use: each loop has its own.
type Failures struct {
	Logger *slog.Logger
	// What names the call in the log lines, e.g. "saga: receive".
	What string
	// Attrs are added to every line (the queue, the table).
	Attrs []slog.Attr

	since time.Time // the first failure of the current run of them; zero while the call works
	n     int       // failures since then
}

// Failed records a failure of the call: the first of a run is logged at
// Warn, the others at Debug.
func (f *Failures) Failed(ctx context.Context, err error) {
	f.n++
	level, msg := slog.LevelDebug, f.What+" failed again"
	if f.since.IsZero() {
		f.since = time.Now()
		level, msg = slog.LevelWarn, f.What+" failed; retrying until it works"
	}
	f.Logger.LogAttrs(ctx, level, msg, append(f.Attrs[:len(f.Attrs):len(f.Attrs)],
		slog.Time("since", f.since), slog.Int("failures", f.n), slog.Any("error", err))...)
}

// Worked records that the call worked: after failures, it logs at Info
// how long they lasted.
func (f *Failures) Worked(ctx context.Context) {
	if f.since.IsZero() {
		return
	}
	f.Logger.LogAttrs(ctx, slog.LevelInfo, f.What+" works again", append(f.Attrs[:len(f.Attrs):len(f.Attrs)],
		slog.Duration("failed.for", time.Since(f.since)), slog.Int("failures", f.n))...)
	f.since, f.n = time.Time{}, 0
}

// Since returns when the current run of failures began, zero while the
// call works.
func (f *Failures) Since() time.Time { return f.since }
