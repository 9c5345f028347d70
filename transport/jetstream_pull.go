package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Pulls. A receiver asks a consumer's leader for messages with pull
// requests, each answered on a reply subject of the receiver's. The server
// hands a message to a pull for as long as the pull lives on the server,
// which is from the moment the request reaches it until its expiry: over
// a slow link (requests reaching the server a second late, or a loaded
// server) that is well after the client stopped waiting for it. A client
// that then stops listening loses every message the server hands to the
// pull meanwhile: each stays locked, unseen, until its ack wait runs out,
// and comes back with its delivery count raised; after MaxDeliveryCount
// such losses it is dead-lettered without ever having been seen.
//
// So a puller keeps listening. Each consumer a receiver reads has one
// puller. Each of its pulls has an inbox of its own, which stays
// subscribed until the server ends the pull (a status, or the batch
// delivered), whether or not a receive still waits for it; every message
// that arrives is kept, in arrival order, until a receive takes it: the
// one waiting now, or the next one. Messages kept while no receive takes
// them are kept locked (renewed) for up to heldMax, and then released. A
// receive waits for its pull's end for at most pullSlack past the pull's
// expiry and then moves on; a pull the server never ends (it restarted,
// say) is forgotten pullForget past its expiry.
//
// Order. The inboxes of a puller's pulls share one channel, which one
// goroutine drains: nats.go fills it in the order the server sent
// (handlers of their own would run in any order), and a consumer sends
// first deliveries in sequence order. So what is kept is in sequence
// order, redeliveries aside. Receives take it oldest first, and stop at
// the first message of a pull that has not ended: a receive returns what
// one pull brought together, and nothing newer than what that pull may
// still bring. So no receive hands out a first delivery older than one
// the puller already handed out, except an activation held back (see
// holdBack), which newer messages pass.

// pullSlack is how long past a pull's expiry a receive waits for the
// server to end it, before it moves on; the pull stays answered.
const pullSlack = time.Second

// pullForget is how long past its expiry a pull that the server never
// ended is forgotten and its inbox closed: a message it brings later than
// that is lost, and comes back when its lock expires.
const pullForget = 30 * time.Second

// heldRenew is how old a kept message's lock may get before it is
// renewed; heldMax is how long after its arrival a kept message that no
// receive took is released (Nak).
func heldRenew(lock time.Duration) time.Duration { return max(lock/3, 10*time.Millisecond) }
func heldMax(lock time.Duration) time.Duration   { return max(2*lock, heldMin) }

const heldMin = 10 * time.Second

// puller pulls from one consumer and keeps what arrives.
type puller struct {
	d       *jsDriver
	subject string        // the consumer's next-message API subject
	lock    time.Duration // the lock a message gets on arrival

	in   chan *nats.Msg // what the pulls' inboxes get, in arrival order
	idle chan struct{}  // poked when the last pull ends (see drain)

	mu       sync.Mutex
	pulls    map[*nats.Subscription]*pull // by inbox: pulls the server may still answer
	draining bool                         // drain runs
	held     []*held                      // arrived, not taken yet, in arrival order
	wake     chan struct{}                // closed (and replaced) when held grows or a pull ends
	renew    *time.Timer                  // keeps held messages locked while any are held
	closed   bool                         // its session closed: release what arrives
}

// pull is one pull request.
type pull struct {
	sub    *nats.Subscription
	forget *time.Timer // ends it if the server never does
	batch  int
	got    int
	sent   time.Time
	expiry time.Duration
	ended  chan struct{} // closed when the server ended it (or it was forgotten)
	done   bool          // ended is closed (read under the puller's mu)
	err    error         // why the server ended it, if it failed
	// release: its receive was cancelled (its receiver is stopping), so
	// what it still brings is released at once rather than kept.
	release bool
}

// held is a message kept until a receive takes it.
type held struct {
	msg      *pulledMsg
	from     *pull // the pull that brought it
	arrived  time.Time
	lockedAt time.Time // arrival, or its last renewal: its lock runs from here
	// notBefore keeps it back until then: whether it may be delivered is
	// not known yet (see cancelledActivations).
	notBefore time.Time
}

func newPuller(d *jsDriver, c jetstream.Consumer, lock time.Duration) *puller {
	info := c.CachedInfo()
	return &puller{
		d:       d,
		subject: "$JS.API.CONSUMER.MSG.NEXT." + info.Stream + "." + info.Name,
		lock:    lock,
		in:      make(chan *nats.Msg, pullerIn),
		idle:    make(chan struct{}, 1),
		pulls:   map[*nats.Subscription]*pull{},
		wake:    make(chan struct{}),
	}
}

// pullerIn is how many messages and statuses a puller's live pulls may
// bring (nats.go drops what does not fit the channel, and the message
// waits out its lock): a pull asks for fewer when the pulls before it
// may bring that many (see roomLocked), and for one at least.
const pullerIn = 512

// request asks the server for up to batch messages (fewer if the live
// pulls leave no room for that many, see pullerIn): waiting up to expires
// for the first, or answered at once with what there is (noWait).
func (p *puller) request(batch int, expires time.Duration, noWait bool) (*pull, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	batch = max(min(batch, p.roomLocked()-1), 1)
	body, err := json.Marshal(struct {
		Expires time.Duration `json:"expires,omitempty"`
		Batch   int           `json:"batch"`
		NoWait  bool          `json:"no_wait,omitempty"`
	}{expires, batch, noWait})
	if err != nil {
		p.mu.Unlock()
		return nil, err
	}
	pl := &pull{batch: batch, sent: time.Now(), expiry: expires, ended: make(chan struct{})}
	// An inbox of its own: the messages a pull brings carry their stream
	// subjects, only its statuses the reply subject.
	reply := p.d.nc.NewInbox()
	sub, err := p.d.nc.ChanSubscribe(reply, p.in)
	if err != nil {
		p.mu.Unlock()
		return nil, err
	}
	pl.sub = sub
	pl.forget = time.AfterFunc(expires+pullForget, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.endLocked(pl, nil)
	})
	p.pulls[sub] = pl
	if !p.draining {
		p.draining = true
		go p.drain()
	}
	p.mu.Unlock()
	if err := p.d.nc.PublishRequest(p.subject, reply, body); err != nil {
		p.mu.Lock()
		p.endLocked(pl, nil)
		p.mu.Unlock()
		return nil, err
	}
	return pl, nil
}

// roomLocked returns how many messages and statuses the live pulls may
// still bring, less than pullerIn.
func (p *puller) roomLocked() int {
	room := pullerIn
	for _, pl := range p.pulls {
		room -= pl.batch - pl.got + 1
	}
	return room
}

// drain hands what the pulls' inboxes get to arrive, in arrival order,
// while any pull may still be answered.
func (p *puller) drain() {
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
func (p *puller) arrive(m *nats.Msg) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl := p.pulls[m.Sub]
	if pl == nil {
		return
	}
	if status := m.Header.Get("Status"); status != "" && len(m.Data) == 0 {
		if status != "100" { // not a heartbeat
			p.endLocked(pl, pullStatusErr(status, m.Header.Get("Description")))
		}
		return
	}
	msg := &pulledMsg{d: p.d, msg: m}
	if p.closed || pl.release || p.d.check() != nil {
		_ = msg.Nak()
	} else {
		now := time.Now()
		p.held = append(p.held, &held{msg: msg, from: pl, arrived: now, lockedAt: now})
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
func (p *puller) endLocked(pl *pull, err error) {
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

func (p *puller) signalLocked() {
	close(p.wake)
	p.wake = make(chan struct{})
}

// renewLocked makes sure held messages are being kept locked.
func (p *puller) renewLocked() {
	if p.renew == nil && len(p.held) > 0 {
		p.renew = time.AfterFunc(heldRenew(p.lock)/2, p.keep)
	}
}

// keep renews the locks of held messages that are due, and releases
// those held too long, or all of them once the broker closed.
func (p *puller) keep() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.renew = nil
	now := time.Now()
	closing := p.closed || p.d.check() != nil
	kept := p.held[:0]
	for _, h := range p.held {
		switch {
		case closing || now.Sub(h.arrived) > heldMax(p.lock):
			_ = h.msg.Nak()
		case now.Sub(h.lockedAt) >= heldRenew(p.lock):
			if h.msg.InProgress() == nil {
				h.lockedAt = now
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

// take removes up to max held messages that may be delivered now (all
// of them for max < 0), oldest first, up to the first one whose pull has
// not ended: what that pull still brings is older than what later pulls
// brought, and is handed out together with what it brought already.
// Messages held back (see holdBack) stay. It renews the lock of those
// kept for more than a quarter of it (and the receive renews them again
// before it returns, see fresh, if what it does meanwhile takes long).
func (p *puller) take(max int) []*held { return p.remove(max, true) }

// takeAll removes every held message that may be delivered now, also
// those of pulls that have not ended (see handOver).
func (p *puller) takeAll() []*held { return p.remove(-1, false) }

func (p *puller) remove(max int, inOrder bool) []*held {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	var out []*held
	kept := p.held[:0]
	for i, h := range p.held {
		if inOrder && !h.from.done {
			kept = append(kept, p.held[i:]...)
			break
		}
		if (max < 0 || len(out) < max) && !now.Before(h.notBefore) {
			if now.Sub(h.lockedAt) >= p.lock/4 && h.msg.InProgress() == nil {
				h.lockedAt = now
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

// holdBack keeps hs until notBefore, ahead of what arrived since.
func (p *puller) holdBack(hs []*held, notBefore time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.d.check() != nil {
		for _, h := range hs {
			_ = h.msg.Nak()
		}
		return
	}
	for _, h := range hs {
		h.notBefore = notBefore
	}
	p.held = append(hs, p.held...)
	p.renewLocked()
}

// ready reports whether take would return a message now.
func (p *puller) ready() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ready, _ := p.readyLocked(time.Now(), time.Time{})
	return ready
}

// readyLocked reports whether take would return a message at now, and
// else the earliest time before until at which a held-back message may
// be taken (until if none).
func (p *puller) readyLocked(now, until time.Time) (bool, time.Time) {
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

// waitEnd waits until pl ended, until passed, ctx ended or the broker
// closed.
func (p *puller) waitEnd(ctx context.Context, pl *pull, until time.Time) {
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-pl.ended:
	case <-t.C:
	case <-ctx.Done():
	case <-p.d.life.Done():
	}
}

// wait waits until take would return a message, pl ended (if not nil),
// until passed, ctx ended or the broker closed.
func (p *puller) wait(ctx context.Context, pl *pull, until time.Time) {
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
		case <-p.d.life.Done():
			t.Stop()
			return
		}
		t.Stop()
	}
}

// cancelled marks pl's receive cancelled: what pl still brings is
// released (Nak) as it arrives.
func (p *puller) cancelled(pl *pull) {
	p.mu.Lock()
	pl.release = true
	p.mu.Unlock()
}

// live returns a pull of batch 1 that waits for a message and may still
// bring one (its expiry and pullSlack not yet passed), or nil.
func (p *puller) live() *pull {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for _, pl := range p.pulls {
		if pl.expiry > 0 && pl.batch == 1 && !pl.release && now.Before(pl.sent.Add(pl.expiry+pullSlack)) {
			return pl
		}
	}
	return nil
}

// close releases what is held and what still arrives; the inbox closes
// once the pulls have ended.
func (p *puller) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, h := range p.held {
		_ = h.msg.Nak()
	}
	clear(p.held)
	p.held = nil
}

// pulledMsg is a message a puller received, acknowledged on its reply
// subject as nats.go's jetstream.Msg would be.
type pulledMsg struct {
	d    *jsDriver
	msg  *nats.Msg
	mu   sync.Mutex
	ackd bool
}

func (m *pulledMsg) Data() []byte         { return m.msg.Data }
func (m *pulledMsg) Headers() nats.Header { return m.msg.Header }

func (m *pulledMsg) Metadata() (*jetstream.MsgMetadata, error) {
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

func (m *pulledMsg) Ack() error        { return m.reply(ackAck, m.publish) }
func (m *pulledMsg) Nak() error        { return m.reply(ackNak, m.publish) }
func (m *pulledMsg) InProgress() error { return m.reply(ackProgress, m.publish) }

// publish sends an acknowledgement without waiting for the server.
func (m *pulledMsg) publish(kind []byte) error { return m.d.nc.Publish(m.msg.Reply, kind) }

// DoubleAck acknowledges and waits for the server's confirmation.
func (m *pulledMsg) DoubleAck(ctx context.Context) error {
	ctx, cancel := m.d.apiContext(ctx)
	defer cancel()
	return m.reply(ackAck, func(kind []byte) error {
		_, err := m.d.nc.RequestWithContext(ctx, m.msg.Reply, kind)
		return err
	})
}

// reply sends an acknowledgment of kind with send (a publish, or a
// request that waits for the server's answer). Only progress may be sent
// more than once.
func (m *pulledMsg) reply(kind []byte, send func(kind []byte) error) error {
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
