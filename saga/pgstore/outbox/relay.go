package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jetsaga/jetsaga/internal/statelog"
	"github.com/jetsaga/jetsaga/saga/pgstore/internal/pgschema"
	"github.com/jetsaga/jetsaga/transport"
)

// recordTimeout bounds the writes that record a pass's outcome (the
// deletes, the dead rows, the commit), which run even if the pass's
// context ends.
const recordTimeout = 30 * time.Second

// publishTimeout bounds the publication of one row: the pass's
// transaction, and its claim on the rows, stay open meanwhile.
const publishTimeout = 30 * time.Second

// maxListenPause bounds the pause before the relay listens again after
// its connection broke.
const maxListenPause = 5 * time.Second

// row is a claimed row of the table.
type row struct {
	id  int64
	q   string
	msg transport.Message
}

// Relay publishes one batch of rows (at most WithBatchSize), oldest
// first, and returns how many it claimed. In one transaction it claims
// the rows (FOR UPDATE SKIP LOCKED: a row another relay holds is left to
// it), publishes each to its queue with its MessageID, deletes those
// published and commits. A row the queue refuses for good (see Run) is
// marked dead instead. At the first other failure it stops: the rows
// published so far are deleted, the failed row records the error and is
// tried again by a later pass, and the error is returned.
func (t *Table) Relay(ctx context.Context) (int, error) {
	tx, err := t.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("outbox: relay: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := t.claim(ctx, tx)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	var (
		published []int64
		failed    error
	)
	// Once claimed, what was published is recorded even if ctx ends: a
	// row left behind is published again (the queue drops the duplicate
	// within its DuplicateWindow), and that is better avoided.
	record, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	for _, r := range rows {
		err := t.publish(ctx, r)
		if err == nil {
			published = append(published, r.id)
			continue
		}
		if refused(err) {
			t.logger.LogAttrs(ctx, slog.LevelError, "outbox: message refused for good; row marked dead",
				slog.String("outbox.table", t.table), slog.Int64("outbox.id", r.id),
				slog.String("queue", r.q), slog.String("message.id", r.msg.MessageID), slog.Any("error", err))
			if _, err := tx.Exec(record, t.sql.dead, r.id, err.Error()); err != nil {
				return len(rows), fmt.Errorf("outbox: relay: marking row %d dead: %w", r.id, err)
			}
			continue
		}
		failed = fmt.Errorf("outbox: relay: publishing row %d to queue %s: %w", r.id, r.q, err)
		if _, err := tx.Exec(record, t.sql.failed, r.id, err.Error()); err != nil {
			return len(rows), errors.Join(failed, err)
		}
		break
	}
	if len(published) > 0 {
		if _, err := tx.Exec(record, t.sql.delete, published); err != nil {
			return len(rows), errors.Join(failed, fmt.Errorf("outbox: relay: deleting published rows: %w", err))
		}
	}
	if err := tx.Commit(record); err != nil {
		return len(rows), errors.Join(failed, fmt.Errorf("outbox: relay: commit: %w", err))
	}
	return len(rows), failed
}

func (t *Table) claim(ctx context.Context, tx pgx.Tx) ([]row, error) {
	rs, err := tx.Query(ctx, t.sql.claim, t.batch)
	if err != nil {
		return nil, fmt.Errorf("outbox: relay: claiming rows: %w", err)
	}
	defer rs.Close()
	var rows []row
	for rs.Next() {
		var (
			r     row
			m     = &r.msg
			sched *time.Time
		)
		if err := rs.Scan(&r.id, &r.q, &m.MessageID, &m.Body, &m.ContentType, &m.CorrelationID,
			&m.SessionID, &m.ReplyTo, &m.Subject, &m.Properties, &sched); err != nil {
			return nil, fmt.Errorf("outbox: relay: reading rows: %w", err)
		}
		if sched != nil {
			m.ScheduledAt = *sched
		}
		rows = append(rows, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("outbox: relay: claiming rows: %w", err)
	}
	return rows, nil
}

func (t *Table) publish(ctx context.Context, r row) error {
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	q, err := t.broker.Queue(ctx, r.q)
	if err != nil {
		return err
	}
	if _, err = q.Send(ctx, &r.msg); err == nil && t.published != nil {
		t.published(r.q, r.msg.MessageID)
	}
	return err
}

// refused reports whether the queue refuses a message for what it is,
// so that trying again cannot help.
func refused(err error) bool {
	for _, e := range []error{transport.ErrInvalidMessage, transport.ErrMessageTooLarge,
		transport.ErrSessionRequired, transport.ErrInvalidQueueName, transport.ErrUnsupported} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Run relays committed rows until ctx ends, then returns nil. It wakes
// when a transaction that wrote rows commits (LISTEN on the table's
// notification channel, on a connection of its own from the pool), and
// every poll interval (WithPollInterval) in case a notification was
// missed; it relays batch after batch while batches come back full. A
// failed pass (the broker or the database unreachable) is tried again
// after a pause that doubles from 100 ms up to the poll interval, logged
// at Warn when passes start failing and at Info when one works again (not
// once per pass); a row's publication is bounded by 30 s. A broken LISTEN
// connection is replaced after at most 5 s, and a pass follows. A broker
// whose connection closed for good (transport.ErrClosed) ends Run with an
// error that matches it, logged at Error: Run never returns nil while ctx
// lives.
//
// Rows are published in id order by one relay; several relays (in one
// process or many) take different rows at once, so across relays rows
// may be published out of order.
//
// A row whose message the queue refuses for good —
// transport.ErrInvalidMessage (a queue that requires sessions and a
// message without one), ErrMessageTooLarge (a queue on a server with a
// smaller max payload), ErrInvalidQueueName, ErrUnsupported — gets
// dead_at and last_error, is logged at Error, and is skipped from then
// on: it does not hold up the others. A queue that does not exist is
// created with the default transport.QueueConfig, as Dispatcher.SendTo
// does.
func (t *Table) Run(ctx context.Context) error {
	wake := make(chan struct{}, 1)
	listening := make(chan struct{})
	go func() { defer close(listening); t.listen(ctx, wake) }()
	defer func() { <-listening }()
	backoff := time.Duration(0)
	failing := statelog.Failures{Logger: t.logger, What: "outbox: relay pass", Attrs: []slog.Attr{slog.String("outbox.table", t.table)}}
	for {
		n, err := t.Relay(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, transport.ErrClosed) {
			t.logger.LogAttrs(ctx, slog.LevelError, "outbox: relay stopped: its broker's connection closed for good",
				slog.String("outbox.table", t.table), slog.Any("error", err))
			return fmt.Errorf("outbox: relay of table %s stopped: %w", t.table, err)
		}
		pause := t.poll
		switch {
		case err != nil:
			backoff = min(max(2*backoff, 100*time.Millisecond), t.poll)
			pause = backoff
			failing.Failed(ctx, err)
		case n == t.batch:
			failing.Worked(ctx)
			backoff = 0
			continue // more may be waiting
		default:
			failing.Worked(ctx)
			backoff = 0
		}
		timer := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-wake:
			if err != nil { // the failure's pause first, then the rows
				select {
				case <-ctx.Done():
					timer.Stop()
					return nil
				case <-timer.C:
				}
			}
		case <-timer.C:
		}
		timer.Stop()
	}
}

// listen LISTENs on the table's channel and signals wake on each
// notification, and once each time it starts listening (rows may have
// been committed while it was not), until ctx ends. A broken connection
// is replaced after a pause.
func (t *Table) listen(ctx context.Context, wake chan<- struct{}) {
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	pause := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := t.listenOnce(ctx, signal)
		if ctx.Err() != nil {
			return
		}
		t.logger.LogAttrs(ctx, slog.LevelDebug, "outbox: listen connection lost",
			slog.String("outbox.table", t.table), slog.Any("error", err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, t.poll, maxListenPause)
	}
}

func (t *Table) listenOnce(ctx context.Context, signal func()) error {
	pc, err := t.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := pc.Hijack() // LISTEN state must not go back to the pool
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, "LISTEN "+pgschema.Quote(t.names.channel)); err != nil {
		return err
	}
	signal()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		signal()
	}
}
