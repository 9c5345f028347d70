package saga

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nuid"

	"github.com/jetsaga/jetsaga/transport"
)

// HealthKeyPrefix starts the key of each running dispatcher's health
// record in the state of its queue (see HealthRecord).
const HealthKeyPrefix = "=health."

// Health records are written every healthEvery, every healthBusy while
// steps run, and within a second of a change of Health, and expire
// healthTTL after their last write.
const (
	healthEvery = 30 * time.Second
	healthBusy  = 5 * time.Second
	healthTTL   = 3 * healthEvery
)

// HealthRecord is what a running dispatcher publishes about itself in its
// queue's state, so that operators (the jetsaga console, `jetsaga queues
// show`) see every dispatcher of a queue and whether it waits out an
// outage, and what it did in the last hour: written as Run starts, every
// 30 s (every 5 s while steps run), and within a second of a change (a
// wait beginning or ending); removed as Run returns; it expires 90 s after
// its last write (a process that died, whose last hour goes with it: for
// a history that outlives processes, export saga/sagaotel's metrics).
type HealthRecord struct {
	Queue   string    `json:"queue"`
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	Updated time.Time `json:"updated"`
	// Waiting, Since, Attempts and Error are the dispatcher's Health.
	Waiting  bool      `json:"waiting,omitempty"`
	Since    time.Time `json:"since,omitzero"`
	Attempts int       `json:"attempts,omitempty"`
	Error    string    `json:"error,omitempty"`
	// Recent is the dispatcher's last hour by minute and saga type, oldest
	// first: minutes without steps are left out.
	Recent []RecentMinute `json:"recent,omitempty"`
}

// reportHealth publishes d's HealthRecord in q's state until ctx ends,
// then removes it. Failures are logged at Debug: the record is for
// operators, and the store may be the very thing that is down.
func (d *Dispatcher) reportHealth(ctx context.Context, q *transport.Queue) {
	host, _ := os.Hostname()
	key := HealthKeyPrefix + nuid.Next()
	rec := HealthRecord{Queue: d.queueName, Host: host, PID: os.Getpid(), Started: d.cfg.now().UTC()}
	var rev uint64
	write := func() {
		h := d.Health()
		rec.Updated = d.cfg.now().UTC()
		rec.Waiting, rec.Since, rec.Attempts, rec.Error = h.Waiting, h.Since.UTC(), h.Attempts, ""
		if h.Err != nil {
			rec.Error = truncate(h.Err.Error(), 512)
		}
		rec.Recent = d.recent.snapshot(rec.Updated)
		value, _ := json.Marshal(rec)
		res, err := q.CommitState(ctx, transport.StateCommit{Key: key, Value: value, Rev: rev, TTL: healthTTL})
		switch {
		case err == nil:
			rev = res.Rev
		case errors.Is(err, transport.ErrStateConflict):
			rev = 0 // expired meanwhile: written again next time
			if _, cur, lerr := q.LoadState(ctx, key); lerr == nil {
				rev = cur
			}
		case ctx.Err() == nil:
			d.cfg.logger.LogAttrs(ctx, slog.LevelDebug, "saga: publishing the dispatcher's health failed",
				slog.String("queue", d.queueName), slog.Any("error", err))
		}
	}
	write()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last, wrote := d.Health().Waiting, time.Now()
	for {
		select {
		case <-ctx.Done():
			if rev != 0 {
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				_ = q.DeleteState(dctx, key, rev)
				cancel()
			}
			return
		case <-tick.C:
			since := time.Since(wrote)
			if w := d.Health().Waiting; w != last || since >= healthEvery || since >= healthBusy && d.recent.hasNews() {
				write()
				last, wrote = w, time.Now()
			}
		}
	}
}

// ReadHealth lists the health records of the dispatchers running on q
// (see HealthRecord): those that wrote one within the last 90 s.
func ReadHealth(ctx context.Context, q *transport.Queue) iter.Seq2[HealthRecord, error] {
	return func(yield func(HealthRecord, error) bool) {
		for key, err := range q.StateKeys(ctx, HealthKeyPrefix) {
			if err != nil {
				yield(HealthRecord{}, err)
				return
			}
			if !strings.HasPrefix(key, HealthKeyPrefix) {
				continue
			}
			raw, _, err := q.LoadState(ctx, key)
			if errors.Is(err, transport.ErrStateNotFound) {
				continue // gone meanwhile
			}
			var rec HealthRecord
			if err == nil {
				err = json.Unmarshal(raw, &rec)
			}
			if !yield(rec, err) {
				return
			}
		}
	}
}
