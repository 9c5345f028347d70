package pull

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Slack is how long past a pull's expiry a receive waits for the server
// to end it, before it moves on; the pull stays answered.
const Slack = time.Second

// forgetAfter is how long past its expiry a pull that the server never
// ended is forgotten and its inbox closed: a message it brings later than
// that is lost, and comes back when its lock expires.
const forgetAfter = 30 * time.Second

// heldRenew is how old a kept message's lock may get before it is
// renewed; heldMax is how long after its arrival a kept message that no
// receive took is released (Nak).
func heldRenew(lock time.Duration) time.Duration { return max(lock/3, 10*time.Millisecond) }
func heldMax(lock time.Duration) time.Duration   { return max(2*lock, heldMin) }

const heldMin = 10 * time.Second

// Conn is what a puller needs of the broker it serves.
type Conn struct {
	NC *nats.Conn
	// Check returns an error once the broker closed: what arrives then
	// is released.
	Check func() error
	// Done is closed when the broker closes, ending every wait.
	Done <-chan struct{}
	// APIContext bounds a context without a deadline by the broker's API
	// timeout (for DoubleAck).
	APIContext func(context.Context) (context.Context, context.CancelFunc)
}

// ErrClosed is what Request returns once the puller is closed.
var ErrClosed = errors.New("pull: puller closed")

// Puller pulls from one consumer and keeps what arrives. One serves
// every receive of a consumer.
type Puller struct {
	c       *Conn
	subject string        // the consumer's next-message API subject
	lock    time.Duration // the lock a message gets on arrival

	in   chan *nats.Msg // what the pulls' inboxes get, in arrival order
	idle chan struct{}  // poked when the last pull ends (see drain)

	mu       sync.Mutex
	pulls    map[*nats.Subscription]*Request // by inbox: pulls the server may still answer
	draining bool                            // drain runs
	held     []*Held                         // arrived, not taken yet, in arrival order
	wake     chan struct{}                   // closed (and replaced) when held grows or a pull ends
	renew    *time.Timer                     // keeps held messages locked while any are held
	closed   bool                            // its session closed: release what arrives
	// empty: the consumer's last answer said it had nothing more to
	// give (see Empty).
	empty bool
	// sent and seqOf, if set (see SetSent); seen: the highest of seqOf
	// over what arrived, or sent when a pull made then expired with
	// nothing.
	sent  *atomic.Uint64
	seqOf func(nats.Header) uint64
	seen  uint64
	bell  *Bell // rung with wake, if set (see SetBell)
}

// Bell tells one who waits on several pullers that one of them has news:
// a message arrived, or a pull ended. A receive over several consumers
// waits on it rather than on each puller.
type Bell struct {
	mu sync.Mutex
	ch chan struct{} // closed by ring; nil while no one waits
}

// C returns a channel closed at the next ring.
func (b *Bell) C() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *Bell) ring() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}

// SetBell has p ring b whenever what it holds grows or a pull ends (as
// Wait wakes).
func (p *Puller) SetBell(b *Bell) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bell = b
}

// SetSent has p tell whether a message sent to its consumer's stream
// has not come yet (see Expecting): sent is the highest sequence number
// of a message sent (the sender raises it once the message is stored),
// and seqOf returns that number of a message the consumer delivers (0 if
// it has none). Sequence numbers are in the order the consumer delivers.
func (p *Puller) SetSent(sent *atomic.Uint64, seqOf func(nats.Header) uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sent, p.seqOf = sent, seqOf
}

// Request is one pull request.
type Request struct {
	sub    *nats.Subscription
	forget *time.Timer // ends it if the server never does
	batch  int
	got    int
	sent   time.Time
	sentUp uint64 // the puller's sent when it was made (see SetSent)
	expiry time.Duration
	ended  chan struct{} // closed when the server ended it (or it was forgotten)
	done   bool          // ended is closed (read under the puller's mu)
	err    error         // why the server ended it, if it failed
	// release: its receive was cancelled (its receiver is stopping), so
	// what it still brings is released at once rather than kept.
	release bool
}

// Expires returns when the pull expires on the server, as the client
// counts: from the moment it sent the request.
func (pl *Request) Expires() time.Time { return pl.sent.Add(pl.expiry) }

// Ended reports whether the server ended pl (or it was forgotten), and
// if so why, if it failed.
func (pl *Request) Ended() (bool, error) {
	select {
	case <-pl.ended:
		return true, pl.err
	default:
		return false, nil
	}
}

// Held is a message kept until a receive takes it.
type Held struct {
	Msg *Msg
	// LockedAt is its arrival, or its last renewal: its lock runs from
	// here.
	LockedAt time.Time

	from    *Request // the pull that brought it
	arrived time.Time
	// notBefore keeps it back until then: whether it may be delivered is
	// not known yet (see HoldBack).
	notBefore time.Time
}

// New returns a puller of consumer cons over c; a message it brings is
// locked for lock from its arrival.
func New(c *Conn, cons jetstream.Consumer, lock time.Duration) *Puller {
	info := cons.CachedInfo()
	return &Puller{
		c:       c,
		subject: "$JS.API.CONSUMER.MSG.NEXT." + info.Stream + "." + info.Name,
		lock:    lock,
		in:      make(chan *nats.Msg, pullerIn),
		idle:    make(chan struct{}, 1),
		pulls:   map[*nats.Subscription]*Request{},
		wake:    make(chan struct{}),
	}
}

// pullerIn is how many messages and statuses a puller's live pulls may
// bring (nats.go drops what does not fit the channel, and the message
// waits out its lock): a pull asks for fewer when the pulls before it
// may bring that many (see roomLocked), and for one at least.
const pullerIn = 512

// Request asks the server for up to batch messages (fewer if the live
// pulls leave no room for that many, see pullerIn): waiting up to expires
// for the first, or answered at once with what there is (noWait).
func (p *Puller) Request(batch int, expires time.Duration, noWait bool) (*Request, error) {
	p.mu.Lock()
	pl, body, err := p.newLocked(batch, expires, noWait)
	p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return pl, p.send(pl, body)
}

// Watch returns a live pull for one message that waits up to expires (see
// Live), and whether it made one: there was none. Receivers of a consumer
// that has nothing to give (see Empty) share it rather than ask the
// server again and again: the server hands it the next message as soon
// as there is one.
func (p *Puller) Watch(expires time.Duration) (pl *Request, made bool, err error) {
	p.mu.Lock()
	if pl := p.liveLocked(time.Now()); pl != nil {
		p.mu.Unlock()
		return pl, false, nil
	}
	pl, body, err := p.newLocked(1, expires, false)
	p.mu.Unlock()
	if err != nil {
		return nil, false, err
	}
	return pl, true, p.send(pl, body)
}

// newLocked makes a pull request and its inbox, and returns it and the
// request's body for send.
func (p *Puller) newLocked(batch int, expires time.Duration, noWait bool) (*Request, []byte, error) {
	if p.closed {
		return nil, nil, ErrClosed
	}
	batch = max(min(batch, p.roomLocked()-1), 1)
	body, err := json.Marshal(struct {
		Expires time.Duration `json:"expires,omitempty"`
		Batch   int           `json:"batch"`
		NoWait  bool          `json:"no_wait,omitempty"`
	}{expires, batch, noWait})
	if err != nil {
		return nil, nil, err
	}
	pl := &Request{batch: batch, sent: time.Now(), expiry: expires, ended: make(chan struct{})}
	if p.sent != nil {
		pl.sentUp = p.sent.Load()
	}
	// An inbox of its own: the messages a pull brings carry their stream
	// subjects, only its statuses the reply subject.
	reply := p.c.NC.NewInbox()
	sub, err := p.c.NC.ChanSubscribe(reply, p.in)
	if err != nil {
		return nil, nil, err
	}
	pl.sub = sub
	pl.forget = time.AfterFunc(expires+forgetAfter, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.endLocked(pl, nil)
	})
	p.pulls[sub] = pl
	if !p.draining {
		p.draining = true
		go p.drain()
	}
	return pl, body, nil
}

// send sends pl's request; a pull whose request could not be sent ends.
func (p *Puller) send(pl *Request, body []byte) error {
	if err := p.c.NC.PublishRequest(p.subject, pl.sub.Subject, body); err != nil {
		p.mu.Lock()
		p.endLocked(pl, nil)
		p.mu.Unlock()
		return err
	}
	return nil
}

// Empty reports whether the consumer's last answer said it had nothing
// more to give: a pull ended with "no messages" or its expiry, or the
// last message it brought was a first delivery with none pending after
// it. A receiver asks an empty consumer no more (see Watch); the first
// message a pull brings from it, or any status else, ends that. It is a
// hint, for the cost of receiving: a message that arrives meanwhile goes
// to a watching pull (see Watch), never missed.
func (p *Puller) Empty() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.empty
}

// Expecting reports whether the consumer said it had nothing (see Empty)
// while a message sent to its stream (see SetSent) has not come: no
// message from at or after it arrived, and no pull made after it expired
// empty. That message is on its way to the consumer, and may be in
// flight to a pull already: on a replicated consumer the server hands a
// message to a waiting pull and sends it only once its replicas recorded
// the delivery, while it answers a request that does not wait at once, so
// "no messages" can come before the message an earlier pull got. A
// receive that is to bring what was sent before it waits for a pull
// instead (see Expect). If another receiver of the consumer (another
// process) took the message, the expectation lasts until a later message
// arrives or a pull expires empty.
func (p *Puller) Expecting() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.empty && p.sent != nil && p.sent.Load() > p.seen
}

// Expect waits, until ctx ends, the broker closes, or until passes, for
// the message that Expecting says is on its way, with a pull for one
// message (or the one live already, see Watch) that waits up to expires.
// It returns once that pull ended: its message, if any, is left to take.
func (p *Puller) Expect(ctx context.Context, expires time.Duration, until time.Time) error {
	pl, _, err := p.Watch(expires)
	if err != nil {
		return err
	}
	p.WaitEnd(ctx, pl, until)
	return nil
}

// roomLocked returns how many messages and statuses the live pulls may
// still bring, less than pullerIn.
func (p *Puller) roomLocked() int {
	room := pullerIn
	for _, pl := range p.pulls {
		room -= pl.batch - pl.got + 1
	}
	return room
}

// drain hands what the pulls' inboxes get to arrive, in arrival order,
// while any pull may still be answered.
func (p *Puller) drain() {
	for {
		select {
		case m := <-p.in:
			p.arrive(m)
		case <-p.idle:
		}
		p.mu.Lock()
		if len(p.pulls) == 0 && len(p.in) == 0 {
			// Every inbox is closed: nothing more arrives.
			p.draining = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
}

// arrive handles what the server sends to a pull: a message, or the
// status that ends the pull. What reaches a pull that was forgotten is
// dropped: it waits out its lock.
func (p *Puller) arrive(m *nats.Msg) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl := p.pulls[m.Sub]
	if pl == nil {
		return
	}
	if status := m.Header.Get("Status"); status != "" && len(m.Data) == 0 {
		if status != "100" { // not a heartbeat
			// No messages, or the pull's expiry: the consumer had none to
			// give; any other end (a leader change, say) tells nothing.
			p.empty = status == "404" || status == "408"
			if status == "408" && pl.sentUp > p.seen {
				// A pull that waited its whole life with nothing: what was
				// sent before it was made came, to it or to another.
				p.seen = pl.sentUp
			}
			p.endLocked(pl, pullStatusErr(status, m.Header.Get("Description")))
		}
		return
	}
	// A first delivery with none pending after it: the consumer has
	// nothing more to give, unless a redelivery is due (one that comes
	// says so: it may not be the last).
	md, err := m.Metadata()
	p.empty = err == nil && md.NumPending == 0 && md.NumDelivered == 1
	if p.seqOf != nil {
		p.seen = max(p.seen, p.seqOf(m.Header))
	}
	msg := &Msg{c: p.c, msg: m}
	if p.closed || pl.release || p.c.Check() != nil {
		_ = msg.Nak()
	} else {
		now := time.Now()
		p.held = append(p.held, &Held{Msg: msg, from: pl, arrived: now, LockedAt: now})
		p.signalLocked()
		p.renewLocked()
	}
	if pl.got++; pl.got >= pl.batch {
		p.endLocked(pl, nil)
	}
}

// pullStatusErr returns why a pull ended with status: nil for its expiry
// or for no messages, else an error.
func pullStatusErr(status, description string) error {
	switch status {
	case "404", "408":
		return nil
	case "503":
		return nats.ErrNoResponders
	}
	return fmt.Errorf("transport: pull ended with status %s %s", status, description)
}

// endLocked ends pl and closes its inbox.
func (p *Puller) endLocked(pl *Request, err error) {
	if pl.done {
		return
	}
	pl.done = true
	delete(p.pulls, pl.sub)
	pl.forget.Stop()
	_ = pl.sub.Unsubscribe()
	if len(p.pulls) == 0 {
		select {
		case p.idle <- struct{}{}:
		default:
		}
	}
	pl.err = err
	close(pl.ended)
	p.signalLocked()
}

func (p *Puller) signalLocked() {
	close(p.wake)
	p.wake = make(chan struct{})
	if p.bell != nil {
		p.bell.ring()
	}
}

// renewLocked makes sure held messages are being kept locked.
func (p *Puller) renewLocked() {
	if p.renew == nil && len(p.held) > 0 {
		p.renew = time.AfterFunc(heldRenew(p.lock)/2, p.keep)
	}
}

// keep renews the locks of held messages that are due, and releases
// those held too long, or all of them once the broker closed.
func (p *Puller) keep() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.renew = nil
	now := time.Now()
	closing := p.closed || p.c.Check() != nil
	kept := p.held[:0]
	for _, h := range p.held {
		switch {
		case closing || now.Sub(h.arrived) > heldMax(p.lock):
			_ = h.Msg.Nak()
		case now.Sub(h.LockedAt) >= heldRenew(p.lock):
			if h.Msg.InProgress() == nil {
				h.LockedAt = now
			}
			kept = append(kept, h)
		default:
			kept = append(kept, h)
		}
	}
	clear(p.held[len(kept):])
	p.held = kept
	p.renewLocked()
}

// Take removes up to max held messages that may be delivered now (all
// of them for max < 0), oldest first, up to the first one whose pull has
// not ended: what that pull still brings is older than what later pulls
// brought, and is handed out together with what it brought already.
// Messages held back (see HoldBack) stay. It renews the lock of those
// kept for more than a quarter of it (and the receive renews them again
// before it returns, see transport's jsQueue.fresh, if what it does meanwhile takes long).
func (p *Puller) Take(max int) []*Held { return p.remove(max, true) }

// TakeAll removes every held message that may be delivered now, also
// those of pulls that have not ended (for a reader that hands every
// message on at once).
func (p *Puller) TakeAll() []*Held { return p.remove(-1, false) }

func (p *Puller) remove(max int, inOrder bool) []*Held {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	var out []*Held
	kept := p.held[:0]
	for i, h := range p.held {
		if inOrder && !h.from.done {
			kept = append(kept, p.held[i:]...)
			break
		}
		if (max < 0 || len(out) < max) && !now.Before(h.notBefore) {
			if now.Sub(h.LockedAt) >= p.lock/4 && h.Msg.InProgress() == nil {
				h.LockedAt = now
			}
			out = append(out, h)
			continue
		}
		kept = append(kept, h)
	}
	clear(p.held[len(kept):])
	p.held = kept
	return out
}

// HoldBack keeps hs until notBefore, ahead of what arrived since.
func (p *Puller) HoldBack(hs []*Held, notBefore time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.c.Check() != nil {
		for _, h := range hs {
			_ = h.Msg.Nak()
		}
		return
	}
	for _, h := range hs {
		h.notBefore = notBefore
	}
	p.held = append(hs, p.held...)
	p.renewLocked()
}

// Ready reports whether Take would return a message now.
func (p *Puller) Ready() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ready, _ := p.readyLocked(time.Now(), time.Time{})
	return ready
}

// ReadyBy reports whether Take would return a message now, and else the
// earliest time before until at which a held-back message may be taken
// (until if none).
func (p *Puller) ReadyBy(until time.Time) (bool, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.readyLocked(time.Now(), until)
}

// readyLocked reports whether Take would return a message at now, and
// else the earliest time before until at which a held-back message may
// be taken (until if none).
func (p *Puller) readyLocked(now, until time.Time) (bool, time.Time) {
	next := until
	for _, h := range p.held {
		if !h.from.done {
			break
		}
		if !now.Before(h.notBefore) {
			return true, next
		}
		if h.notBefore.Before(next) {
			next = h.notBefore
		}
	}
	return false, next
}

// WaitEnd waits until pl ended, until passed, ctx ended or the broker
// closed.
func (p *Puller) WaitEnd(ctx context.Context, pl *Request, until time.Time) {
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-pl.ended:
	case <-t.C:
	case <-ctx.Done():
	case <-p.c.Done:
	}
}

// Wait waits until Take would return a message, pl ended (if not nil),
// until passed, ctx ended or the broker closed.
func (p *Puller) Wait(ctx context.Context, pl *Request, until time.Time) {
	for {
		p.mu.Lock()
		now := time.Now()
		ready, next := p.readyLocked(now, until)
		wake := p.wake
		p.mu.Unlock()
		if ready || !now.Before(until) {
			return
		}
		var ended <-chan struct{}
		if pl != nil {
			ended = pl.ended
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-wake:
		case <-t.C:
		case <-ended:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			return
		case <-p.c.Done:
			t.Stop()
			return
		}
		t.Stop()
	}
}

// Cancelled marks pl's receive cancelled: what pl still brings is
// released (Nak) as it arrives.
func (p *Puller) Cancelled(pl *Request) {
	p.mu.Lock()
	pl.release = true
	p.mu.Unlock()
}

// Live returns a pull of batch 1 that waits for a message and may still
// bring one (its expiry and Slack not yet passed), or nil.
func (p *Puller) Live() *Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.liveLocked(time.Now())
}

func (p *Puller) liveLocked(now time.Time) *Request {
	for _, pl := range p.pulls {
		if pl.expiry > 0 && pl.batch == 1 && !pl.release && now.Before(pl.sent.Add(pl.expiry+Slack)) {
			return pl
		}
	}
	return nil
}

// Close releases what is held and what still arrives; the inbox closes
// once the pulls have ended.
func (p *Puller) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, h := range p.held {
		_ = h.Msg.Nak()
	}
	clear(p.held)
	p.held = nil
}

// Msg is a message a puller received, acknowledged on its reply
// subject as nats.go's jetstream.Msg would be.
type Msg struct {
	c    *Conn
	msg  *nats.Msg
	mu   sync.Mutex
	ackd bool
}

func (m *Msg) Data() []byte         { return m.msg.Data }
func (m *Msg) Headers() nats.Header { return m.msg.Header }

func (m *Msg) Metadata() (*jetstream.MsgMetadata, error) {
	md, err := m.msg.Metadata()
	if err != nil {
		return nil, err
	}
	return &jetstream.MsgMetadata{
		Sequence:     jetstream.SequencePair{Consumer: md.Sequence.Consumer, Stream: md.Sequence.Stream},
		NumDelivered: md.NumDelivered,
		NumPending:   md.NumPending,
		Timestamp:    md.Timestamp,
		Stream:       md.Stream,
		Consumer:     md.Consumer,
		Domain:       md.Domain,
	}, nil
}

var (
	ackAck      = []byte("+ACK")
	ackNak      = []byte("-NAK")
	ackProgress = []byte("+WPI")
)

func (m *Msg) Ack() error        { return m.reply(ackAck, m.publish) }
func (m *Msg) Nak() error        { return m.reply(ackNak, m.publish) }
func (m *Msg) InProgress() error { return m.reply(ackProgress, m.publish) }

// publish sends an acknowledgement without waiting for the server.
func (m *Msg) publish(kind []byte) error { return m.c.NC.Publish(m.msg.Reply, kind) }

// DoubleAck acknowledges and waits for the server's confirmation.
func (m *Msg) DoubleAck(ctx context.Context) error {
	ctx, cancel := m.c.APIContext(ctx)
	defer cancel()
	return m.reply(ackAck, func(kind []byte) error {
		_, err := m.c.NC.RequestWithContext(ctx, m.msg.Reply, kind)
		return err
	})
}

// reply sends an acknowledgment of kind with send (a publish, or a
// request that waits for the server's answer). Only progress may be sent
// more than once.
func (m *Msg) reply(kind []byte, send func(kind []byte) error) error {
	progress := string(kind) == string(ackProgress)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ackd {
		return jetstream.ErrMsgAlreadyAckd
	}
	err := send(kind)
	if err == nil && !progress {
		m.ackd = true
	}
	return err
}
