package transport

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"iter"
	"sync"
	"sync/atomic"
	"time"
)

// Broker opens queues on one backend: JetStream (NewJetStream) or memory
// (NewMemory). Both keep the same promises; transporttest checks that.
type Broker struct {
	d      driver
	queues sync.Map // name → *Queue, as last opened or attached
	topics sync.Map // name → *Topic, likewise
}

// OpenQueue creates the queue cfg describes, or updates it to cfg if it
// exists; it is idempotent. It returns ErrInvalidQueueName or
// ErrInvalidConfig for a config it refuses, including an existing queue
// whose storage limits could silently drop pending scheduled messages.
func (b *Broker) OpenQueue(ctx context.Context, cfg QueueConfig) (*Queue, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	qd, err := b.d.openQueue(ctx, cfg)
	if err != nil {
		return nil, err
	}
	q := &Queue{cfg: cfg, d: qd, b: b}
	b.queues.Store(cfg.Name, q)
	return q, nil
}

// Queue returns the queue named name as it exists, without changing its
// configuration, for a sender that does not own the queue. A queue that
// does not exist yet is created with the default QueueConfig. The broker
// remembers the queues it opened or attached, so repeated calls are
// cheap; OpenQueue on this broker replaces what it remembers.
func (b *Broker) Queue(ctx context.Context, name string) (*Queue, error) {
	if q, ok := b.queues.Load(name); ok {
		return q.(*Queue), nil
	}
	if err := ValidateQueueName(name); err != nil {
		return nil, err
	}
	qd, cfg, err := b.d.attachQueue(ctx, name)
	if errors.Is(err, ErrQueueNotFound) {
		return b.OpenQueue(ctx, QueueConfig{Name: name})
	}
	if err != nil {
		return nil, err
	}
	q, _ := b.queues.LoadOrStore(name, &Queue{cfg: cfg, d: qd, b: b})
	return q.(*Queue), nil
}

// DeleteQueue removes a queue, its dead-letter queue and all their
// messages, scheduled ones included. Deleting a missing queue is not an error.
func (b *Broker) DeleteQueue(ctx context.Context, name string) error {
	if err := ValidateQueueName(name); err != nil {
		return err
	}
	b.queues.Delete(name)
	return b.d.deleteQueue(ctx, name)
}

// Validate reports whether Send would refuse m for what it holds — a bad
// field (ErrInvalidMessage) or a size over the server's max payload
// (ErrMessageTooLarge) — whatever queue it goes to. Code that stores a
// message to send later, such as an outbox, calls it when it stores.
func (b *Broker) Validate(m *Message) error {
	if err := validateMessage(m, false); err != nil {
		return err
	}
	if n, max := wireSize(m), b.d.maxPayload(); int64(n) > max {
		return fmt.Errorf("%w: %d bytes, server max_payload is %d", ErrMessageTooLarge, n, max)
	}
	return nil
}

// MaxBodySize returns the largest Body that m (its other fields as they
// are) can carry: the server's max payload (1 MiB by default; the memory
// broker uses that default) less m's encoded header fields and a reserve
// of 512 bytes for the headers the transport and the server add. It is 0
// if m's other fields alone do not fit.
func (b *Broker) MaxBodySize(m *Message) int64 {
	c := *m
	c.Body = nil
	return max(b.d.maxPayload()-int64(wireSize(&c)), 0)
}

// ActivationTick returns how late the backend activates a due scheduled
// message on an idle server: 250 ms on JetStream, whose server activates
// due message schedules on a 250 ms tick (more under load); 0 on the
// memory broker, which activates a message at its time by its clock.
// Timeout engines pick their default early activation by it.
func (b *Broker) ActivationTick() time.Duration { return b.d.activationTick() }

// Close releases the broker's resources. It does not close a *nats.Conn
// the caller passed in.
func (b *Broker) Close() error { return b.d.close() }

// DeadLetterSuffix ends the Name of every dead-letter queue.
const DeadLetterSuffix = "/$DeadLetterQueue"

// Queue is a queue opened on a Broker. It is safe for concurrent use.
type Queue struct {
	cfg QueueConfig
	d   queueDriver
	b   *Broker
	rr  atomic.Uint64
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.cfg.Name }

// Config returns the queue's config with defaults filled in.
func (q *Queue) Config() QueueConfig { return q.cfg }

// SendResult reports what the broker did with a sent message.
type SendResult struct {
	// Seq is the scheduled sequence number (ScheduledBit set) of a message
	// sent with ScheduledAt, which Cancel takes. It is 0 for an immediate
	// send: as in Service Bus, whose send returns no sequence number, the
	// active sequence number is assigned as the message enters the queue
	// and is on the received or browsed message. On a duplicate, Seq is
	// the pending scheduled message's number if there is one, else 0.
	Seq uint64
	// Duplicate is true when the queue remembers the MessageID (see
	// QueueConfig.DuplicateWindow); the message was not stored again.
	Duplicate bool
	// Cancelled, on a duplicate, is true when the queue remembers the
	// MessageID because the scheduled message with it was cancelled (for
	// CancelRecordTTL): that message was never delivered, and none with
	// the ID will be. False leaves the earlier message's fate unsaid.
	Cancelled bool
}

// Send stores m in the queue. If m.ScheduledAt is set, Send schedules it
// for that time, as Schedule does. m is not modified.
//
// When Send returns nil the message is stored. On JetStream it reaches
// the queue — Receive, Peek and Browse see it — a moment later (typically
// well under a millisecond; it moves in from the partition's schedule
// stream, see the package documentation), in the order Send calls
// returned.
//
// Errors: ErrInvalidMessage, ErrSessionRequired, ErrMessageTooLarge,
// ErrQueueFull, ErrUnsupported (sending to a dead-letter queue),
// ErrClosed, or the context's error; after any error other than the
// argument checks the message may or may not be stored, and sending it
// again with the same MessageID is safe.
func (q *Queue) Send(ctx context.Context, m *Message) (SendResult, error) {
	if err := validateMessage(m, q.cfg.RequiresSession); err != nil {
		return SendResult{}, err
	}
	p := q.partitionOf(m)
	if !m.ScheduledAt.IsZero() {
		return q.d.schedule(ctx, m, p, m.ScheduledAt)
	}
	return q.d.send(ctx, m, p)
}

// Schedule stores m to become active at time at and returns its scheduled
// sequence number, which Cancel takes. A time in the past activates at
// once, as in Service Bus; a zero time is refused with ErrInvalidMessage.
// On activation the message is appended to the queue as if sent at that
// instant: a new sequence number, EnqueuedAt at activation, ScheduledAt
// kept. It is never delivered before at (by the server's clock).
func (q *Queue) Schedule(ctx context.Context, m *Message, at time.Time) (uint64, error) {
	if at.IsZero() {
		return 0, invalid("ScheduledAt", "zero time")
	}
	if err := validateMessage(m, q.cfg.RequiresSession); err != nil {
		return 0, err
	}
	r, err := q.d.schedule(ctx, m, q.partitionOf(m), at)
	return r.Seq, err
}

// Cancel deletes the scheduled message with sequence number seq and
// returns a definite outcome, the same on both brokers:
//   - nil: cancelled; it will never be delivered.
//   - ErrAlreadyActivated: it activated, before or during this call; it
//     has been or will be delivered.
//   - ErrNotFound: it was cancelled earlier, or the queue never issued
//     this number as a scheduled sequence number.
//
// Any other error (ErrClosed, the context's error, a server error) leaves
// the outcome unknown; calling Cancel again is safe and then answers
// definitely. On JetStream a message due within 500 ms counts as
// activated (the server may be activating it already): Cancel returns
// ErrAlreadyActivated and the message is delivered. The JetStream broker
// knows a cancellation for CancelRecordTTL (default 7 days); after that
// it reports a long-gone scheduled message as ErrAlreadyActivated, and so
// it does for a number in the schedule log that never named a scheduled
// message (which no Schedule call returns).
func (q *Queue) Cancel(ctx context.Context, seq uint64) error {
	if !IsScheduledSeq(seq) || Partition(seq) >= q.cfg.Partitions {
		return fmt.Errorf("%w: seq %d is not a scheduled sequence number of this queue", ErrNotFound, seq)
	}
	return q.d.cancel(ctx, seq)
}

// CancelMany cancels several scheduled messages concurrently and returns
// one outcome per sequence number, in order, each as Cancel reports it.
func (q *Queue) CancelMany(ctx context.Context, seqs []uint64) []error {
	errs := make([]error, len(seqs))
	atOnce(len(seqs), 64, func(i int) { errs[i] = q.Cancel(ctx, seqs[i]) })
	return errs
}

// atOnce calls f(i) for each i in [0, n), up to limit calls at a time,
// and returns once they have all returned; a single call runs in the
// caller's goroutine.
func atOnce(n, limit int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}

// Peek returns up to max messages, active and scheduled, with sequence
// numbers at or above from, in sequence order, without locking them. Pass
// the last Seq plus one to read the next page. Active messages sort before
// scheduled ones of the same partition, because of the ScheduledBit.
func (q *Queue) Peek(ctx context.Context, from uint64, max int) ([]*Message, error) {
	if max <= 0 {
		return nil, fmt.Errorf("%w: max %d: must be positive", ErrInvalidOption, max)
	}
	return q.d.peek(ctx, from, max)
}

// Browse iterates over the queue's messages from sequence number from on,
// page by page, as Peek returns them. It stops at the first error.
func (q *Queue) Browse(ctx context.Context, from uint64) iter.Seq2[*Message, error] {
	const page = 256
	return func(yield func(*Message, error) bool) {
		for {
			ms, err := q.Peek(ctx, from, page)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, m := range ms {
				if !yield(m, nil) {
					return
				}
			}
			if len(ms) < page {
				return
			}
			from = ms[len(ms)-1].Seq + 1
		}
	}
}

// Receive waits for messages and returns between 1 and max of them, each
// locked to the caller for the queue's LockDuration (peek-lock). It returns
// the context's error if none arrives before ctx ends. Messages are
// retrieved in sequence order per partition; competing receivers, in this
// process or others, each get different messages. On a queue of several
// partitions a Receive shares max among the partitions that have
// messages, starting at the partition after the one the previous Receive
// on the Queue started at: a partition with a burst gives its share and
// no more while others have messages, the others' shares go to it when
// they have none. On JetStream a partition whose consumer last said it
// had nothing is not asked again on each Receive: one pull waits there,
// shared by the Queue's receivers and renewed every second, and brings
// its next message (a send, an activated schedule or a redelivery) as
// soon as the server has it, for the next Receive to take — a quiet
// partition costs about two requests a second, not one per Receive. A
// message sent through the same Broker to such a partition before the
// Receive is waited for there (on a replicated stream it reaches the
// consumer a moment after Send returns), up to 100 ms once another
// partition gave messages, else up to a second; one sent by another
// process comes with the pull that waits there, by the next Receive. On a
// session queue it returns ErrSessionRequired: use AcceptSession.
func (q *Queue) Receive(ctx context.Context, max int) ([]*Delivery, error) {
	return q.receive(ctx, max, nil)
}

// ReceiveFrom is Receive from some of the queue's partitions only: those
// listed in partitions (numbered from 0, as Partition numbers them). A
// receiver that cannot take more of one partition's messages for now (a
// dispatcher whose key limit holds back a burst there, say) goes on taking
// the others'. partitions must be non-empty and each in range, else it
// returns ErrInvalidOption.
func (q *Queue) ReceiveFrom(ctx context.Context, max int, partitions []int) ([]*Delivery, error) {
	from := make([]bool, q.cfg.Partitions)
	some := false
	for _, p := range partitions {
		if p < 0 || p >= len(from) {
			return nil, fmt.Errorf("%w: partition %d: the queue has partitions 0 to %d", ErrInvalidOption, p, len(from)-1)
		}
		from[p], some = true, true
	}
	if !some {
		return nil, fmt.Errorf("%w: no partition to receive from", ErrInvalidOption)
	}
	return q.receive(ctx, max, from)
}

// receive is Receive from the partitions from marks (all if nil).
func (q *Queue) receive(ctx context.Context, max int, from []bool) ([]*Delivery, error) {
	if q.cfg.RequiresSession {
		return nil, ErrSessionRequired
	}
	if max <= 0 {
		return nil, fmt.Errorf("%w: max %d: must be positive", ErrInvalidOption, max)
	}
	return q.d.receive(ctx, max, from)
}

// AcceptSession returns a receiver that holds one session exclusively
// (see SessionReceiver), or ErrSessionLocked if another receiver holds
// it. Messages of a session are handed out one at a time in sequence
// order: the next is not delivered until the current one is completed or
// dead-lettered, or its lock expires.
func (q *Queue) AcceptSession(ctx context.Context, sessionID string) (*SessionReceiver, error) {
	if !q.cfg.RequiresSession {
		return nil, ErrNotSessionQueue
	}
	if sessionID == "" {
		return nil, invalid("SessionID", "empty")
	}
	if err := validID("SessionID", sessionID); err != nil {
		return nil, err
	}
	sd, err := q.d.acceptSession(ctx, sessionID, q.partitionOfSession(sessionID))
	if err != nil {
		return nil, err
	}
	return &SessionReceiver{id: sessionID, d: sd}, nil
}

// AcceptNextSession waits for a session that has messages and that no
// receiver holds, and accepts it. It returns ErrNoSession if none turns
// up before ctx ends.
func (q *Queue) AcceptNextSession(ctx context.Context) (*SessionReceiver, error) {
	if !q.cfg.RequiresSession {
		return nil, ErrNotSessionQueue
	}
	for {
		id, err := q.d.nextSession(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: %w", ErrNoSession, context.Cause(ctx))
			}
			return nil, err
		}
		sr, err := q.AcceptSession(ctx, id)
		if !errors.Is(err, ErrSessionLocked) {
			return sr, err
		}
		// Another receiver took it between the look and the accept.
	}
}

// DeadLetterQueue returns the queue's dead-letter queue, named like
// Service Bus's: "<queue>/$DeadLetterQueue". It can be browsed and
// received from like any queue; sending or scheduling to it returns
// ErrUnsupported.
func (q *Queue) DeadLetterQueue() *Queue {
	cfg := q.cfg
	cfg.Name += DeadLetterSuffix
	cfg.Partitions, cfg.RequiresSession = 1, false
	return &Queue{cfg: cfg, d: q.d.deadLetter(), b: q.b}
}

func (q *Queue) partitionOf(m *Message) int {
	switch {
	case q.cfg.Partitions == 1:
		return 0
	case m.SessionID != "":
		return q.partitionOfSession(m.SessionID)
	case m.PartitionKey != "":
		return hashMod(m.PartitionKey, q.cfg.Partitions)
	case m.MessageID != "":
		return hashMod(m.MessageID, q.cfg.Partitions)
	}
	return int(q.rr.Add(1) % uint64(q.cfg.Partitions))
}

func (q *Queue) partitionOfSession(id string) int { return hashMod(id, q.cfg.Partitions) }

func hashMod(s string, n int) int {
	h := fnv.New64a()
	h.Write([]byte(s))
	return int(h.Sum64() % uint64(n))
}

// Delivery is a received message, locked to its receiver until it is
// settled with Complete, Abandon or DeadLetter, or its lock expires.
// Settle each delivery once; its methods are safe for concurrent use.
type Delivery struct {
	*Message
	// DeliveryCount is 1 on the first delivery and rises with each
	// redelivery (after Abandon or an expired lock).
	DeliveryCount int

	s           settler
	mu          sync.Mutex
	lockedUntil time.Time
	settled     bool
}

func newDelivery(m *Message, count int, lockedUntil time.Time, s settler) *Delivery {
	return &Delivery{Message: m, DeliveryCount: count, lockedUntil: lockedUntil, s: s}
}

// LockedUntil returns when the lock expires unless renewed.
func (d *Delivery) LockedUntil() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lockedUntil
}

// Complete removes the message from the queue.
// It returns ErrLockLost if the lock expired and the message was, or will
// be, redelivered; ErrAlreadySettled if it was settled before.
func (d *Delivery) Complete(ctx context.Context) error {
	return d.settle(func() error { return d.s.complete(ctx) })
}

// Abandon releases the lock so the message is redelivered, with a higher
// DeliveryCount.
func (d *Delivery) Abandon(ctx context.Context) error {
	return d.settle(func() error { return d.s.abandon(ctx) })
}

// DeadLetter moves the message to the queue's dead-letter queue with a
// reason and a description, which the dead-lettered copy carries along
// with the message's body, MessageID and properties. Options change what
// the copy carries (for example, a retry copy dead-lettered under the
// MessageID of the message it retried). The reason, the description and
// the changed copy are checked like a sent message; an invalid one
// returns ErrInvalidMessage and leaves the delivery unsettled.
func (d *Delivery) DeadLetter(ctx context.Context, reason, description string, opts ...DeadLetterOption) error {
	if err := validValue("reason", reason); err != nil {
		return err
	}
	if err := validValue("description", description); err != nil {
		return err
	}
	var edit func(*Message)
	if len(opts) > 0 {
		probe := d.Message.Clone()
		for _, o := range opts {
			o(probe)
		}
		if err := validateMessage(probe, false); err != nil {
			return err
		}
		edit = func(m *Message) {
			for _, o := range opts {
				o(m)
			}
		}
	}
	return d.settle(func() error { return d.s.deadLetter(ctx, reason, description, edit) })
}

// DeadLetterOption changes the copy of a message that DeadLetter stores.
type DeadLetterOption func(*Message)

// WithDeadLetterMessageID gives the dead-lettered copy MessageID id.
func WithDeadLetterMessageID(id string) DeadLetterOption {
	return func(m *Message) { m.MessageID = id }
}

// WithDeadLetterProperties sets application properties on the
// dead-lettered copy; a key with an empty value is removed.
func WithDeadLetterProperties(props map[string]string) DeadLetterOption {
	return func(m *Message) {
		for k, v := range props {
			if v == "" {
				delete(m.Properties, k)
				continue
			}
			if m.Properties == nil {
				m.Properties = make(map[string]string, len(props))
			}
			m.Properties[k] = v
		}
	}
}

// RenewLock extends the lock by the queue's LockDuration from now.
func (d *Delivery) RenewLock(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.settled {
		return ErrAlreadySettled
	}
	until, err := d.s.renew(ctx)
	if err != nil {
		return err
	}
	d.lockedUntil = until
	return nil
}

func (d *Delivery) settle(f func() error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.settled {
		return ErrAlreadySettled
	}
	err := f()
	if err == nil {
		d.settled = true
	}
	return err
}

// SessionReceiver receives the messages of one session, in order. It
// holds the session exclusively, as a Service Bus session receiver does:
// until Close, or until its session lock expires, no other receiver (in
// any process) can accept the session. The lock lasts LockDuration and
// is renewed by every Receive (also while Receive waits) and by
// RenewLock; a receiver that does neither for LockDuration loses it
// (ErrSessionLockLost) and the session moves on to another receiver.
type SessionReceiver struct {
	id string
	d  sessionDriver
}

// SessionID returns the session this receiver accepted.
func (s *SessionReceiver) SessionID() string { return s.id }

// Receive waits for the session's next message. The one after it is not
// delivered to anyone until this one is settled or its lock expires.
// It returns the context's error if no message arrives before ctx ends.
func (s *SessionReceiver) Receive(ctx context.Context) (*Delivery, error) {
	return s.d.receive(ctx)
}

// RenewLock extends the session lock by LockDuration from now and returns
// when it will expire; ErrSessionLockLost if it already expired. Call it
// from a handler that runs longer than LockDuration between receives
// (Delivery.RenewLock extends the message's own lock).
func (s *SessionReceiver) RenewLock(ctx context.Context) (time.Time, error) {
	return s.d.renew(ctx)
}

// Close releases the session, so that another receiver can accept it at
// once. A message the receiver still holds is redelivered when its own
// lock expires.
func (s *SessionReceiver) Close() error { return s.d.close() }

// driver is a backend: the JetStream or the in-memory one.
type driver interface {
	openQueue(ctx context.Context, cfg QueueConfig) (queueDriver, error)
	// attachQueue returns an existing queue and its config, or
	// ErrQueueNotFound.
	attachQueue(ctx context.Context, name string) (queueDriver, QueueConfig, error)
	deleteQueue(ctx context.Context, name string) error
	// maxPayload is the largest message the backend stores, in bytes.
	maxPayload() int64
	// activationTick is how late the backend activates a due scheduled
	// message on an idle server (see Broker.ActivationTick).
	activationTick() time.Duration
	// stagesStateCommits reports whether a CommitState with messages to
	// schedule, on a queue of cfg, is staged by the server in a synced
	// file of its own (see Queue.StateCommitsStaged).
	stagesStateCommits(cfg QueueConfig) bool
	close() error
}

// queueDriver does what Queue's methods promise, after Queue has checked
// the arguments and picked the partition.
type queueDriver interface {
	send(ctx context.Context, m *Message, partition int) (SendResult, error)
	schedule(ctx context.Context, m *Message, partition int, at time.Time) (SendResult, error)
	cancel(ctx context.Context, seq uint64) error
	peek(ctx context.Context, from uint64, max int) ([]*Message, error)
	// receive receives from the partitions from marks, or from all of
	// them if from is nil.
	receive(ctx context.Context, max int, from []bool) ([]*Delivery, error)
	acceptSession(ctx context.Context, id string, partition int) (sessionDriver, error)
	// nextSession returns the ID of a session that has messages and none
	// locked, waiting until there is one or ctx ends.
	nextSession(ctx context.Context) (string, error)
	deadLetter() queueDriver
	counts(ctx context.Context) (Counts, error)

	// State records (state.go), in partition p (the key's).
	loadState(ctx context.Context, key string, p int) ([]byte, uint64, error)
	commitState(ctx context.Context, c StateCommit, p int) (StateResult, error)
	deleteState(ctx context.Context, key string, rev uint64, p int) error
	stateKeys(ctx context.Context, prefix string) iter.Seq2[string, error]
}

type sessionDriver interface {
	receive(ctx context.Context) (*Delivery, error)
	renew(ctx context.Context) (time.Time, error)
	close() error
}

type settler interface {
	complete(ctx context.Context) error
	// completeNoWait completes without waiting for the backend to confirm
	// it, where the backend can (see Delivery.CompleteNoWait).
	completeNoWait(ctx context.Context) error
	abandon(ctx context.Context) error
	// deadLetter stores a copy of the message, changed by edit if it is
	// not nil, in the dead-letter queue, and removes the message.
	deadLetter(ctx context.Context, reason, description string, edit func(*Message)) error
	renew(ctx context.Context) (time.Time, error)
}
