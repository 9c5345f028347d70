package outbox

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// Table is an outbox table: Send and Schedule write a message as a row
// in the caller's transaction, and Run (the relay) publishes the rows of
// committed transactions to their queues. It is safe for concurrent use.
type Table struct {
	pool   *pgxpool.Pool
	broker *transport.Broker
	table  string
	names  names
	sql    statements
	logger *slog.Logger
	poll   time.Duration
	batch  int

	published func(queue, messageID string) // tests: called after each publish
}

// statements are the SQL statements of a Table, on its table.
type statements struct {
	insert, claim, delete, dead, failed string
}

const columns = "queue, message_id, body, content_type, correlation_id, session_id, reply_to, subject, properties, scheduled_at"

func statementsFor(n names) statements {
	return statements{
		// The notification is delivered when the transaction commits,
		// never if it rolls back; several in one transaction are one.
		insert: "WITH i AS (INSERT INTO " + n.table + " (" + columns + ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING 1) " +
			"SELECT pg_notify($11, '') FROM i",
		claim:  "SELECT id, " + columns + " FROM " + n.table + " WHERE dead_at IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED",
		delete: "DELETE FROM " + n.table + " WHERE id = ANY($1)",
		dead:   "UPDATE " + n.table + " SET dead_at = now(), attempts = attempts + 1, last_error = $2 WHERE id = $1",
		failed: "UPDATE " + n.table + " SET attempts = attempts + 1, last_error = $2 WHERE id = $1",
	}
}

// New returns the outbox Table (WithTable; DefaultTable otherwise) in
// pool's database, whose relay publishes on broker. Send and Schedule
// check messages against broker's limits. The table must have been
// migrated to this code's SchemaVersion (Migrate, or Migration applied
// with your own tool): otherwise New returns ErrNeedsMigration
// (ErrSchemaTooNew for a table only newer code can use).
func New(ctx context.Context, pool *pgxpool.Pool, broker *transport.Broker, opts ...Option) (*Table, error) {
	if pool == nil || broker == nil {
		return nil, fmt.Errorf("%w: nil pool or broker", ErrInvalidOption)
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := checkSchema(ctx, pool, c.table); err != nil {
		return nil, err
	}
	n := nameOf(c.table)
	return &Table{
		pool: pool, broker: broker, table: c.table, names: n, sql: statementsFor(n),
		logger: c.logger, poll: c.poll, batch: c.batch,
	}, nil
}

// Name returns the name of the outbox table.
func (t *Table) Name() string { return t.table }

// Send writes m, for queue, in tx: once tx commits, the relay publishes
// it, as Queue.Send would (m.ScheduledAt set schedules it, as Schedule
// does); if tx rolls back, it never is. It returns m's MessageID, or, if
// m has none, the one it gives the row (random, 22 characters): the
// queue's duplicate detection drops a second publication of the row. m
// is not modified.
//
// A message the queue would refuse (transport.Broker.Validate) or a bad
// queue name is ErrInvalidMessage, and nothing is written. Queue names
// and every field of m reach SQL only as parameters. Whether the queue
// requires sessions is not known here: a message without a SessionID for
// such a queue is refused by the relay (see Run). A nil tx is ErrNoTx.
func (t *Table) Send(ctx context.Context, tx pgx.Tx, queue string, m *transport.Message) (string, error) {
	if m == nil {
		return "", fmt.Errorf("%w: nil message", ErrInvalidMessage)
	}
	return t.write(ctx, tx, queue, m, m.ScheduledAt)
}

// Schedule writes m, for queue, in tx, to be scheduled for at once tx
// commits, as Queue.Schedule would (a time in the past activates at
// once). It is Send with m.ScheduledAt = at; a zero at is
// ErrInvalidMessage.
func (t *Table) Schedule(ctx context.Context, tx pgx.Tx, queue string, m *transport.Message, at time.Time) (string, error) {
	if m == nil || at.IsZero() {
		return "", fmt.Errorf("%w: nil message or zero time", ErrInvalidMessage)
	}
	return t.write(ctx, tx, queue, m, at)
}

// SendSaga writes in tx, for d's queue, the message d.Send(ctx, m,
// opts...) would send (saga.Dispatcher.Message): a saga started or fed
// through the outbox is one started by Dispatcher.Send. Without
// saga.WithMessageID the row gets a random MessageID, as in Send.
func (t *Table) SendSaga(ctx context.Context, tx pgx.Tx, d *saga.Dispatcher, m any, opts ...saga.SendOption) (string, error) {
	if d == nil {
		return "", fmt.Errorf("%w: nil dispatcher", ErrNoTx)
	}
	msg, err := d.Message(m, opts...)
	if err != nil {
		return "", err
	}
	return t.Send(ctx, tx, d.Queue(), msg)
}

func (t *Table) write(ctx context.Context, tx pgx.Tx, queue string, m *transport.Message, at time.Time) (string, error) {
	if tx == nil {
		return "", ErrNoTx
	}
	if err := transport.ValidateQueueName(queue); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidMessage, err)
	}
	c := *m
	if c.MessageID == "" {
		c.MessageID = newID()
	}
	if err := t.broker.Validate(&c); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidMessage, err)
	}
	body := c.Body
	if body == nil {
		body = []byte{}
	}
	var props map[string]string
	if len(c.Properties) > 0 {
		props = c.Properties
	}
	var sched *time.Time
	if !at.IsZero() {
		sched = &at
	}
	_, err := tx.Exec(ctx, t.sql.insert, queue, c.MessageID, body, c.ContentType, c.CorrelationID,
		c.SessionID, c.ReplyTo, c.Subject, props, sched, t.names.channel)
	if err != nil {
		return "", fmt.Errorf("outbox: writing a message for queue %s: %w", queue, err)
	}
	return c.MessageID, nil
}

// newID returns a random MessageID: 128 bits, base64url.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:])
}
