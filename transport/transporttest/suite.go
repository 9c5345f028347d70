package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/transport"
)

// Features says what a backend can do beyond the common contract.
type Features struct {
	// Restart stops the backend's server with messages pending (abrupt:
	// SIGKILL), keeps it down for downtime, and starts it again. It
	// returns once the server accepts connections again; brokers made
	// before it must keep working (nats.go reconnects). nil: the backend
	// has no server (restart tests are skipped with a message saying so).
	Restart func(t *testing.T, abrupt bool, downtime time.Duration)
	// CancelMargin is how close to its due time a backend may refuse to
	// cancel a scheduled message, reporting ErrAlreadyActivated (and then
	// delivering it). Tests that expect a Cancel to succeed schedule
	// further ahead than this.
	CancelMargin time.Duration
	// ActivationSlack is how late a scheduled message may activate
	// (JetStream's scheduler ticks every 250 ms). Used only as an upper
	// bound when awaiting; lower bounds (never early) are always strict.
	ActivationSlack time.Duration
	// DedupForgetsOnTime says the backend forgets a MessageID as soon as
	// its DuplicateWindow has passed. Without it, the suite checks only
	// that IDs are remembered for at least the window.
	DedupForgetsOnTime bool
	// SlowLink makes a broker on the backend's server whose requests
	// reach the server delay late (see DelayProxy). nil: the backend has
	// no link to slow down (the slow-link tests are skipped with a
	// message saying so).
	SlowLink func(t *testing.T, delay time.Duration) *transport.Broker
}

// Run runs every test of the contract against brokers made by newBroker
// (called once per subtest; it registers its own cleanup).
func Run(t *testing.T, newBroker func(t *testing.T) *transport.Broker, f Features) {
	t.Helper()
	if f.ActivationSlack < 0 {
		t.Fatalf("Features.ActivationSlack %v: must not be negative", f.ActivationSlack)
	}
	s := &suite{newBroker: newBroker, f: f}
	// Restart runs first and alone: subtests that call t.Parallel wait
	// until this function returns.
	t.Run("Restart", s.testRestart)
	for _, g := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"Send", s.testSend},
		{"Schedule", s.testSchedule},
		{"Cancel", s.testCancel},
		{"GapFree", s.testGapFree},
		{"Browse", s.testBrowse},
		{"Receive", s.testReceive},
		{"Session", s.testSession},
		{"Partition", s.testPartition},
		{"Duplicate", s.testDuplicate},
		{"Queue", s.testQueue},
		{"Input", s.testInput},
		{"Topic", s.testTopic},
		{"Counts", s.testCounts},
		{"SlowLink", s.testSlowLink},
		{"State", s.testState},
	} {
		parallel(t, g.name, g.run)
	}
}

type suite struct {
	newBroker func(t *testing.T) *transport.Broker
	f         Features
}

const (
	// clockSkew bounds the difference between a broker timestamp and the
	// test's clock when checking that a timestamp is sane. Never-early
	// checks do not use it.
	clockSkew = time.Second
	// awaitMargin is added to the time something must happen by before a
	// test gives up waiting for it. It costs time only when a test fails.
	awaitMargin = 5 * time.Second
	// quietMargin is how long past the last moment a message could appear
	// a test keeps receiving to make sure it does not.
	quietMargin = 500 * time.Millisecond
	// promptMargin is how soon a waiting call must return once its
	// context is cancelled or its broker closed.
	promptMargin = 2 * time.Second
	// pollTick is how often the slow-link test polls.
	pollTick = 10 * time.Millisecond
)

// parallel runs f as a parallel subtest of t.
func parallel(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		f(t)
	})
}

// open makes a broker with s.newBroker and opens a fresh queue on it,
// named after the test unless cfg.Name is set.
func (s *suite) open(t *testing.T, cfg transport.QueueConfig) (*transport.Broker, *transport.Queue) {
	t.Helper()
	b := s.newBroker(t)
	return b, openQueue(t, b, cfg)
}

// openQueue deletes any queue left under cfg's name, opens it afresh and
// deletes it again when the test ends. An empty cfg.Name is replaced by
// queueName(t, "").
func openQueue(t *testing.T, b *transport.Broker, cfg transport.QueueConfig) *transport.Queue {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = queueName(t, "")
	}
	reserveQueue(t, b, cfg.Name)
	cfg.Partitions = keyedConfig(t, b, cfg.Name, cfg.Partitions)
	q, err := b.OpenQueue(t.Context(), cfg)
	if err != nil {
		t.Fatalf("OpenQueue(%+v): %v", cfg, err)
	}
	return q
}

// reserveQueue deletes any queue left under name, and deletes it again
// when the test ends.
func reserveQueue(t *testing.T, b *transport.Broker, name string) {
	t.Helper()
	if err := b.DeleteQueue(t.Context(), name); err != nil {
		t.Fatalf("DeleteQueue(%q) before the test: %v", name, err)
	}
	// Registered after newBroker's cleanup, so it runs before the broker
	// closes.
	t.Cleanup(func() {
		// A cluster may still be electing leaders after a restart test: a
		// request may time out, and is retried as a user would.
		deadline := time.Now().Add(time.Minute)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := b.DeleteQueue(ctx, name)
			cancel()
			if err == nil || errors.Is(err, transport.ErrClosed) {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("DeleteQueue(%q) after the test: %v", name, err)
				return
			}
			time.Sleep(200 * time.Millisecond) // between retries, not a wait for a condition
		}
	})
}

// queueName returns a valid queue name unique to the test and suffix: the
// test's name with other characters than [A-Za-z0-9_-] replaced by '_',
// shortened from the front, plus a hash of the full name.
func queueName(t *testing.T, suffix string) string {
	full := t.Name()
	if suffix != "" {
		full += "/" + suffix
	}
	h := fnv.New32a()
	h.Write([]byte(full))
	tag := fmt.Sprintf("-%08x", h.Sum32())
	name := []byte(full)
	for i, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			name[i] = '_'
		}
	}
	if max := 64 - len(tag); len(name) > max {
		name = name[len(name)-max:]
	}
	return string(name) + tag
}

// eventually waits for cond, and fails the test with the formatted
// message if that takes longer than timeout.
func eventually(t *testing.T, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	testutil.AwaitTrue(t, timeout, fmt.Sprintf(format, args...), cond)
}

// withTimeout returns a context derived from t.Context that ends after d.
func withTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// numbered returns a message whose body is prefix-i, for numbered.
func numbered(prefix string, i int) *transport.Message {
	return &transport.Message{Body: fmt.Appendf(nil, "%s-%d", prefix, i)}
}

// number returns i for a body made by numbered(prefix, i).
func number(m *transport.Message, prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(string(m.Body), prefix+"-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	return i, err == nil
}

func send(t *testing.T, q *transport.Queue, m *transport.Message) transport.SendResult {
	t.Helper()
	r, err := q.Send(t.Context(), keyed(q, m))
	if err != nil {
		t.Fatalf("Send(%s): %v", describe(m), err)
	}
	if r.Duplicate {
		t.Fatalf("Send(%s): Duplicate true, want false", describe(m))
	}
	if !m.ScheduledAt.IsZero() {
		return r
	}
	if r.Seq != 0 {
		t.Errorf("Send(%s): Seq %#x, want 0 (an immediate send reports no sequence number)", describe(m), r.Seq)
	}
	r.Seq = awaitActive(t, q, m)
	return r
}

// claims records, per queue, the active sequence numbers awaitActive has
// attributed to a sent message, so that equal messages sent one after
// another get one each.
var claims sync.Map // *transport.Queue → *claimed

type claimed struct {
	mu   sync.Mutex
	seqs map[uint64]bool
}

// awaitActive waits until the message just sent shows up as an active
// message of q, and returns its sequence number: the first active
// message with the same content that no earlier call claimed. (A send
// reaches the queue shortly after Send returns; the JetStream broker
// moves it in from its schedule stream.) The caller must not receive the
// message concurrently.
func awaitActive(t *testing.T, q *transport.Queue, m *transport.Message) uint64 {
	t.Helper()
	v, _ := claims.LoadOrStore(q, &claimed{seqs: make(map[uint64]bool)})
	c := v.(*claimed)
	var seq uint64
	eventually(t, awaitMargin, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for got, err := range q.Browse(t.Context(), 0) {
			if err != nil || got.State != transport.Active {
				return false
			}
			if !c.seqs[got.Seq] && sameContent(got, m) {
				seq, c.seqs[got.Seq] = got.Seq, true
				return true
			}
		}
		return false
	}, "the message sent (%s) never showed up in the queue", describe(m))
	return seq
}

// sameContent reports whether got carries what the sender set in want.
func sameContent(got, want *transport.Message) bool {
	return bytes.Equal(got.Body, want.Body) && got.MessageID == want.MessageID && got.SessionID == want.SessionID &&
		got.PartitionKey == want.PartitionKey && got.CorrelationID == want.CorrelationID && got.Subject == want.Subject && maps.Equal(got.Properties, want.Properties)
}

func schedule(t *testing.T, q *transport.Queue, m *transport.Message, at time.Time) uint64 {
	t.Helper()
	seq, err := q.Schedule(t.Context(), keyed(q, m), at)
	if err != nil {
		t.Fatalf("Schedule(%s, %v): %v", describe(m), at, err)
	}
	if !transport.IsScheduledSeq(seq) {
		t.Fatalf("Schedule(%s) = seq %#x: IsScheduledSeq false, want true", describe(m), seq)
	}
	return seq
}

func peekAll(t *testing.T, q *transport.Queue) []*transport.Message {
	t.Helper()
	ms, err := q.Peek(t.Context(), 0, 10000)
	if err != nil {
		t.Fatalf("Peek: %v", err)
	}
	return ms
}

// arrival is a delivery and the test's clock when Receive returned it.
type arrival struct {
	*transport.Delivery
	At time.Time
}

// receiveN receives n messages within timeout, completing each, and
// returns them in the order received. It fails the test if fewer arrive.
func receiveN(t *testing.T, q *transport.Queue, n int, timeout time.Duration) []arrival {
	t.Helper()
	return receiveFrom(t, "", q.Receive, n, timeout)
}

// receiveFrom is receiveN with any Receive method; what prefixes failures.
func receiveFrom(t *testing.T, what string, receive func(context.Context, int) ([]*transport.Delivery, error), n int, timeout time.Duration) []arrival {
	t.Helper()
	ctx := withTimeout(t, timeout)
	var got []arrival
	for len(got) < n {
		ds, err := receive(ctx, n-len(got))
		now := time.Now()
		if err != nil {
			t.Fatalf("%sReceive after %d of %d messages within %v: %v", what, len(got), n, timeout, err)
		}
		if len(ds) == 0 || len(ds) > n-len(got) {
			t.Fatalf("%sReceive(max %d) returned %d deliveries, want 1 to %d", what, n-len(got), len(ds), n-len(got))
		}
		for _, d := range ds {
			if err := d.Complete(t.Context()); err != nil {
				t.Fatalf("%sComplete(%s): %v", what, describe(d.Message), err)
			}
			got = append(got, arrival{d, now})
		}
	}
	return got
}

// receiveOne receives one message within timeout and leaves it locked.
func receiveOne(t *testing.T, q *transport.Queue, timeout time.Duration) arrival {
	t.Helper()
	ds, err := q.Receive(withTimeout(t, timeout), 1)
	now := time.Now()
	if err != nil {
		t.Fatalf("Receive within %v: %v", timeout, err)
	}
	if len(ds) != 1 {
		t.Fatalf("Receive(max 1) returned %d deliveries, want 1", len(ds))
	}
	return arrival{ds[0], now}
}

// expectNone fails the test if q delivers any message within d.
func expectNone(t *testing.T, q *transport.Queue, d time.Duration) {
	t.Helper()
	expectNoneFrom(t, "", q.Receive, d)
}

// expectNoneFrom is expectNone with any Receive method; what prefixes
// failures.
func expectNoneFrom(t *testing.T, what string, receive func(context.Context, int) ([]*transport.Delivery, error), d time.Duration) {
	t.Helper()
	ds, err := receive(withTimeout(t, d), 100)
	switch {
	case err == nil:
		for _, d := range ds {
			t.Errorf("%sunexpected delivery: %s", what, describe(d.Message))
		}
	case !errors.Is(err, context.DeadlineExceeded):
		t.Errorf("%sReceive with nothing to deliver: %v, want an error matching %v", what, err, context.DeadlineExceeded)
	}
}

// expectCtxErr checks that err is the error of a context that ended with
// want.
func expectCtxErr(t *testing.T, op string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: %v, want an error matching %v", op, err, want)
	}
}

func describe(m *transport.Message) string {
	if m == nil {
		return "nil message"
	}
	s := fmt.Sprintf("seq %#x body %.40q", m.Seq, m.Body)
	if m.SessionID != "" {
		s += fmt.Sprintf(" session %q", m.SessionID)
	}
	if m.MessageID != "" {
		s += fmt.Sprintf(" id %q", m.MessageID)
	}
	return s
}

// checkSameContent compares the fields a sender sets, except ScheduledAt.
func checkSameContent(t *testing.T, what string, got, want *transport.Message) {
	t.Helper()
	if !bytes.Equal(got.Body, want.Body) {
		t.Errorf("%s: Body %.60q, want %.60q", what, got.Body, want.Body)
	}
	for _, f := range []struct{ name, got, want string }{
		{"ContentType", got.ContentType, want.ContentType},
		{"MessageID", got.MessageID, want.MessageID},
		{"CorrelationID", got.CorrelationID, want.CorrelationID},
		{"SessionID", got.SessionID, want.SessionID},
		{"PartitionKey", got.PartitionKey, want.PartitionKey},
		{"ReplyTo", got.ReplyTo, want.ReplyTo},
		{"Subject", got.Subject, want.Subject},
	} {
		if f.got != f.want {
			t.Errorf("%s: %s %q, want %q", what, f.name, f.got, f.want)
		}
	}
	if !maps.Equal(got.Properties, want.Properties) {
		t.Errorf("%s: Properties %q, want %q", what, got.Properties, want.Properties)
	}
}

// checkEnqueuedAt checks that m.EnqueuedAt is in UTC and within clockSkew
// of [notBefore, notAfter] on the test's clock.
func checkEnqueuedAt(t *testing.T, what string, m *transport.Message, notBefore, notAfter time.Time) {
	t.Helper()
	if m.EnqueuedAt.IsZero() {
		t.Errorf("%s: EnqueuedAt is zero", what)
		return
	}
	if loc := m.EnqueuedAt.Location(); loc != time.UTC {
		t.Errorf("%s: EnqueuedAt %v in location %q, want UTC", what, m.EnqueuedAt, loc)
	}
	if m.EnqueuedAt.Before(notBefore.Add(-clockSkew)) || m.EnqueuedAt.After(notAfter.Add(clockSkew)) {
		t.Errorf("%s: EnqueuedAt %v, want between %v and %v (±%v)", what,
			m.EnqueuedAt, notBefore.UTC(), notAfter.UTC(), clockSkew)
	}
}

// checkNotEarly checks that an activated scheduled message was enqueued
// and received no earlier than it was due.
func checkNotEarly(t *testing.T, a arrival, due time.Time) {
	t.Helper()
	if a.EnqueuedAt.Before(due) {
		t.Errorf("%s: EnqueuedAt %v is %v before ScheduledAt %v",
			describe(a.Message), a.EnqueuedAt.UTC(), due.Sub(a.EnqueuedAt), due.UTC())
	}
	if a.At.Before(due) {
		t.Errorf("%s: received at %v, %v before ScheduledAt %v",
			describe(a.Message), a.At.UTC(), due.Sub(a.At), due.UTC())
	}
	if !a.ScheduledAt.Equal(due) {
		t.Errorf("%s: ScheduledAt %v, want %v", describe(a.Message), a.ScheduledAt.UTC(), due.UTC())
	}
	if transport.IsScheduledSeq(a.Seq) {
		t.Errorf("%s: activated message has a scheduled sequence number", describe(a.Message))
	}
}

// checkSeqs checks that seqs are exactly 1..len(seqs) in some order.
func checkSeqs(t *testing.T, what string, seqs []uint64) {
	t.Helper()
	seen := make(map[uint64]int, len(seqs))
	for _, s := range seqs {
		seen[s]++
	}
	for s, n := range seen {
		if n > 1 {
			t.Errorf("%s: seq %#x observed %d times, want once", what, s, n)
		}
		if s < 1 || s > uint64(len(seqs)) {
			t.Errorf("%s: seq %#x outside 1..%d", what, s, len(seqs))
		}
	}
	for s := uint64(1); s <= uint64(len(seqs)); s++ {
		if seen[s] == 0 {
			t.Errorf("%s: seq %d missing: want every seq of 1..%d", what, s, len(seqs))
		}
	}
}

// checkAscending checks that the messages' Seqs strictly increase.
func checkAscending(t *testing.T, what string, ms []*transport.Message) {
	t.Helper()
	for i := 1; i < len(ms); i++ {
		if ms[i].Seq <= ms[i-1].Seq {
			t.Errorf("%s: seq %#x at index %d follows %#x: want ascending", what, ms[i].Seq, i, ms[i-1].Seq)
		}
	}
}

// cancelAfter returns a context, without a deadline, that is cancelled d
// from now.
func cancelAfter(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	time.AfterFunc(d, cancel)
	return ctx
}

// checkPrompt fails the test if a call that started at start and was
// cancelled after d took more than promptMargin longer to return.
func checkPrompt(t *testing.T, what string, start time.Time, d time.Duration) {
	t.Helper()
	if took := time.Since(start); took > d+promptMargin {
		t.Errorf("%s returned %v after its context was cancelled, want within %v", what, took-d, promptMargin)
	}
}
