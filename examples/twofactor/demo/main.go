// Command demo plays the two-factor flow of package twofactor against a
// real NATS JetStream server and prints, as it happens, what the users do
// and what the user's service receives on its events queue.
//
// Three users log in: ann types a wrong code and then the right one; bob
// asks for a second code (the first code's timeout is cancelled and a new
// one scheduled) and never enters it, so it expires; carol types three
// wrong codes. Codes live 10 seconds so that the demo ends in about 12;
// production uses 5 minutes.
//
//	go run ./examples/twofactor/demo                  # embedded nats-server
//	go run ./examples/twofactor/demo -ttl 5m          # the production TTL
//	go run ./examples/twofactor/demo -nats nats://127.0.0.1:4222
//
// Without -nats (or $NATS_URL) the demo starts an embedded nats-server with
// a temporary store. It keeps saga state in a JetStream key-value bucket
// (saga/kvstore) and timeouts as JetStream message schedules, as a
// service would. On a shared server it stays apart from other
// applications: its streams carry the prefix TWOFACTOR_DEMO and its bucket
// is twofactor_demo, which it empties when it starts and deletes when it
// ends.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/examples/twofactor"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// Where the demo lives on the server.
const (
	prefix      = "TWOFACTOR_DEMO" // JetStream stream names and subjects
	bucket      = "twofactor_demo" // KV bucket of saga state
	authQueue   = "auth"           // the dispatcher's queue
	eventsQueue = "auth-events"    // what the user's service consumes
)

// productionTTL is how long a code lives in production: twofactor's
// default.
const productionTTL = "5m"

func main() {
	url := flag.String("nats", os.Getenv("NATS_URL"), "NATS server URL; empty starts an embedded nats-server")
	ttl := flag.Duration("ttl", 10*time.Second, "how long a code lives (production: 5m)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := run(ctx, os.Stdout, options{NATSURL: *url, TTL: *ttl, Logger: logger}); err != nil {
		fmt.Fprintln(os.Stderr, "twofactor demo:", err)
		os.Exit(1)
	}
}

// options are the demo's settings.
type options struct {
	// NATSURL is the server to use. Default: an embedded nats-server.
	NATSURL string
	// TTL is how long a code lives. Required.
	TTL time.Duration
	// Logger receives the dispatcher's and transport's warnings.
	// Default: slog.Default().
	Logger *slog.Logger
}

// run sets up NATS, the store and the dispatcher, plays the scenario, and
// tears everything down again.
func run(ctx context.Context, out io.Writer, o options) (err error) {
	if o.TTL <= 0 {
		return fmt.Errorf("ttl %v: must be positive", o.TTL)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	p := &printer{w: out}
	p.printf("two-factor demo: codes live %v and allow 3 attempts (production uses %v; set with -ttl)", o.TTL, productionTTL)

	nc, closeNATS, err := connect(o.NATSURL, p)
	if err != nil {
		return err
	}
	defer closeNATS()
	broker, err := transport.NewJetStream(nc, transport.WithPrefix(prefix), transport.WithLogger(o.Logger))
	if err != nil {
		return err
	}
	defer broker.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if err := clean(ctx, broker, js); err != nil {
		return fmt.Errorf("removing an earlier run's queues: %w", err)
	}
	defer func() {
		if cerr := clean(context.WithoutCancel(ctx), broker, js); cerr != nil && err == nil {
			err = fmt.Errorf("cleaning up: %w", cerr)
		}
	}()
	store, err := kvstore.New(ctx, js, kvstore.Config{Bucket: bucket})
	if err != nil {
		return err
	}
	flow := twofactor.New(twofactor.Config{TTL: o.TTL, Events: eventsQueue})
	d, err := saga.NewDispatcher(broker, store, authQueue, saga.WithSagas(flow), saga.WithLogger(o.Logger))
	if err != nil {
		return err
	}
	events, err := broker.OpenQueue(ctx, transport.QueueConfig{Name: eventsQueue})
	if err != nil {
		return err
	}
	p.printf("dispatcher on queue %q, state in KV bucket %q; the user's service reads %q", authQueue, bucket, eventsQueue)
	p.printf("")

	// The dispatcher and the events consumer run until the scenario ends;
	// then Run lets the steps in flight finish and returns.
	bg, stopBG := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = d.Run(bg) })
	f := &feed{p: p, q: events, ch: make(chan event, 64)}
	wg.Go(func() { f.consume(bg) })

	p.start = time.Now()
	s := &scenario{d: d, f: f, p: p, ttl: o.TTL}
	err = s.play(ctx)
	if err == nil {
		p.printf("")
		p.printf("done in %.1fs; stopping the dispatcher", time.Since(p.start).Seconds())
	}
	stopBG()
	wg.Wait()
	if err == nil && runErr != nil {
		err = fmt.Errorf("dispatcher: %w", runErr)
	}
	return err
}

// scenario is the script the users follow.
type scenario struct {
	d   *saga.Dispatcher
	f   *feed
	p   *printer
	ttl time.Duration
}

func (s *scenario) send(ctx context.Context, m any) error {
	_, err := s.d.Send(ctx, m)
	return err
}

func (s *scenario) play(ctx context.Context) error {
	// Wait for any one event at most this long.
	ctx, cancel := context.WithTimeout(ctx, 2*s.ttl+30*time.Second)
	defer cancel()

	// ann: a wrong code, then the right one.
	s.p.say("ann", "requests a code")
	if err := s.send(ctx, twofactor.CodeRequested{Login: "ann", User: "ann"}); err != nil {
		return err
	}
	annCode, _, err := await[twofactor.CodeIssued](ctx, s.f, "ann")
	if err != nil {
		return err
	}
	wrong := wrongCode(annCode.Code, 1)
	s.p.say("ann", "types %s (wrong)", wrong)
	if err := s.send(ctx, twofactor.CodeEntered{Login: "ann", Code: wrong}); err != nil {
		return err
	}
	if _, _, err := await[twofactor.CodeRejected](ctx, s.f, "ann"); err != nil {
		return err
	}
	s.p.say("ann", "types %s", annCode.Code)
	if err := s.send(ctx, twofactor.CodeEntered{Login: "ann", Code: annCode.Code}); err != nil {
		return err
	}
	if _, _, err := await[twofactor.Verified](ctx, s.f, "ann"); err != nil {
		return err
	}

	// bob: a code, a resend a moment later, then nothing.
	s.p.say("bob", "requests a code")
	if err := s.send(ctx, twofactor.CodeRequested{Login: "bob", User: "bob"}); err != nil {
		return err
	}
	bob1, _, err := await[twofactor.CodeIssued](ctx, s.f, "bob")
	if err != nil {
		return err
	}
	if err := s.showTimeouts(ctx); err != nil {
		return err
	}
	resendAt := bob1.ExpiresAt.Add(-s.ttl).Add(s.ttl / 5)
	if err := sleepUntil(ctx, resendAt); err != nil {
		return err
	}
	s.p.say("bob", "asks for a new code")
	if err := s.send(ctx, twofactor.CodeResendRequested{Login: "bob"}); err != nil {
		return err
	}
	bob2, _, err := await[twofactor.CodeIssued](ctx, s.f, "bob")
	if err != nil {
		return err
	}
	if err := s.showTimeouts(ctx); err != nil {
		return err
	}
	s.p.say("bob", "the timeout due %s was cancelled; the new one is due %s", s.p.at(bob1.ExpiresAt), s.p.at(bob2.ExpiresAt))

	// carol: three wrong codes.
	s.p.say("carol", "requests a code")
	if err := s.send(ctx, twofactor.CodeRequested{Login: "carol", User: "carol"}); err != nil {
		return err
	}
	carolCode, _, err := await[twofactor.CodeIssued](ctx, s.f, "carol")
	if err != nil {
		return err
	}
	for i := 1; i <= 3; i++ {
		wrong := wrongCode(carolCode.Code, i)
		s.p.say("carol", "types %s (wrong)", wrong)
		if err := s.send(ctx, twofactor.CodeEntered{Login: "carol", Code: wrong}); err != nil {
			return err
		}
		if i < 3 {
			if _, _, err := await[twofactor.CodeRejected](ctx, s.f, "carol"); err != nil {
				return err
			}
		}
	}
	if _, _, err := await[twofactor.Failed](ctx, s.f, "carol"); err != nil {
		return err
	}

	// bob's first code's expiry passes without an event; the second fires.
	if time.Now().Before(bob2.ExpiresAt) {
		s.p.say("bob", "(waiting for his code to expire at %s)", s.p.at(bob2.ExpiresAt))
	}
	quiet := bob1.ExpiresAt.Add(min(time.Second, (bob2.ExpiresAt.Sub(bob1.ExpiresAt))/2))
	if err := sleepUntil(ctx, quiet); err != nil {
		return err
	}
	if time.Now().Before(bob2.ExpiresAt) {
		s.p.say("bob", "his first code's time (%s) has passed: no event, its timeout was cancelled", s.p.at(bob1.ExpiresAt))
	}
	failed, ev, err := await[twofactor.Failed](ctx, s.f, "bob")
	if err != nil {
		return err
	}
	if failed.Reason != twofactor.ReasonExpired {
		return fmt.Errorf("bob failed for %q, want %q", failed.Reason, twofactor.ReasonExpired)
	}
	s.p.say("bob", "the expiry was enqueued %s after the code's time", ev.EnqueuedAt.Sub(bob2.ExpiresAt).Round(time.Millisecond))
	return s.showTimeouts(ctx)
}

// showTimeouts lists the timeouts waiting in the dispatcher's queue.
func (s *scenario) showTimeouts(ctx context.Context) error {
	n := 0
	for st, err := range s.d.ScheduledTimeouts(ctx, "") {
		if err != nil {
			return err
		}
		if n == 0 {
			s.p.say("", "pending timeouts (Dispatcher.ScheduledTimeouts):")
		}
		n++
		s.p.say("", "  seq=%#x  %s/%-5s  %s  due %s", st.Seq, st.Saga, st.ID, st.Type, s.p.at(st.At))
	}
	if n == 0 {
		s.p.say("", "pending timeouts (Dispatcher.ScheduledTimeouts): none")
	}
	return nil
}

// wrongCode returns a code that differs from code: its last digit plus i.
func wrongCode(code string, i int) string {
	last := code[len(code)-1] - '0'
	return code[:len(code)-1] + string(rune('0'+(int(last)+i)%10))
}

func sleepUntil(ctx context.Context, t time.Time) error {
	select {
	case <-time.After(time.Until(t)):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// event is a message the user's service received on the events queue.
type event struct {
	Seq        uint64
	EnqueuedAt time.Time
	Login      string
	Body       any
}

// feed consumes the events queue, as the user's service would: it prints
// each message as it arrives and passes it on to the scenario.
type feed struct {
	p     *printer
	q     *transport.Queue
	ch    chan event
	stash []event // received, not yet awaited
}

func (f *feed) consume(ctx context.Context) {
	for {
		ds, err := f.q.Receive(ctx, 16)
		if err != nil {
			if ctx.Err() == nil {
				f.p.say("", "receiving events: %v", err)
			}
			return
		}
		for _, d := range ds {
			e, text := decode(d.Message, f.p)
			f.p.say(e.Login, "← %s seq=%d (enqueued %s)  %s", f.q.Name(), d.Seq, f.p.at(d.EnqueuedAt), text)
			if err := d.Complete(context.WithoutCancel(ctx)); err != nil {
				f.p.say("", "completing event: %v", err)
			}
			select {
			case f.ch <- e:
			case <-ctx.Done():
				return
			}
		}
	}
}

// await returns the next event of type M for login, keeping the others
// for later calls. Only the scenario's goroutine calls it.
func await[M any](ctx context.Context, f *feed, login string) (M, event, error) {
	match := func(e event) (M, bool) {
		m, ok := e.Body.(M)
		return m, ok && e.Login == login
	}
	for i, e := range f.stash {
		if m, ok := match(e); ok {
			f.stash = append(f.stash[:i], f.stash[i+1:]...)
			return m, e, nil
		}
	}
	for {
		select {
		case e := <-f.ch:
			if m, ok := match(e); ok {
				return m, e, nil
			}
			f.stash = append(f.stash, e)
		case <-ctx.Done():
			var zero M
			return zero, event{}, fmt.Errorf("waiting for %s for %s: %w", saga.MessageName[M](), login, context.Cause(ctx))
		}
	}
}

// decode decodes an event and describes it in words.
func decode(m *transport.Message, p *printer) (event, string) {
	e := event{Seq: m.Seq, EnqueuedAt: m.EnqueuedAt}
	codec := saga.JSON{}
	var text string
	var err error
	switch typ := m.Properties[saga.TypeProperty]; typ {
	case saga.MessageName[twofactor.CodeIssued]():
		var v twofactor.CodeIssued
		err = codec.Unmarshal(m.Body, &v)
		e.Login, e.Body = v.Login, v
		text = fmt.Sprintf("CodeIssued: code %s for %s, expires %s", v.Code, v.User, p.at(v.ExpiresAt))
	case saga.MessageName[twofactor.CodeRejected]():
		var v twofactor.CodeRejected
		err = codec.Unmarshal(m.Body, &v)
		e.Login, e.Body = v.Login, v
		text = fmt.Sprintf("CodeRejected: %d attempt(s) left", v.Remaining)
	case saga.MessageName[twofactor.Verified]():
		var v twofactor.Verified
		err = codec.Unmarshal(m.Body, &v)
		e.Login, e.Body = v.Login, v
		text = fmt.Sprintf("Verified: %s may log in", v.User)
	case saga.MessageName[twofactor.Failed]():
		var v twofactor.Failed
		err = codec.Unmarshal(m.Body, &v)
		e.Login, e.Body = v.Login, v
		text = fmt.Sprintf("Failed{Reason: %s}: %s may not log in", v.Reason, v.User)
	default:
		text = "unknown message type " + typ
	}
	if err != nil {
		text = fmt.Sprintf("undecodable %s: %v", m.Properties[saga.TypeProperty], err)
	}
	return e, text
}

// printer writes timestamped lines, from any goroutine.
type printer struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time // zero until the scenario starts
}

// printf writes a line without a timestamp.
func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format+"\n", args...)
}

// say writes a line stamped with the time since the start and who it is about.
func (p *printer) say(who, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "%8s  %-5s  %s\n", p.at(time.Now()), who, fmt.Sprintf(format, args...))
}

// at formats t as an offset from the start: +1.234s.
func (p *printer) at(t time.Time) string {
	return fmt.Sprintf("%+.3fs", t.Sub(p.start).Seconds())
}

// connect connects to url, or starts an embedded server if url is empty.
func connect(url string, p *printer) (*nats.Conn, func(), error) {
	if url != "" {
		nc, err := nats.Connect(url)
		if err != nil {
			return nil, nil, err
		}
		p.printf("connected to %s", url)
		return nc, nc.Close, nil
	}
	srv, err := embedded.Start(embedded.Options{})
	if err != nil {
		return nil, nil, err
	}
	nc, err := srv.Connect()
	if err != nil {
		srv.Shutdown()
		return nil, nil, err
	}
	p.printf("started an embedded nats-server at %s", srv.ClientURL())
	return nc, func() { nc.Close(); srv.Shutdown() }, nil
}

// clean removes what the demo keeps on the server: its queues and bucket.
func clean(ctx context.Context, b *transport.Broker, js jetstream.JetStream) error {
	for _, q := range []string{authQueue, eventsQueue} {
		if err := b.DeleteQueue(ctx, q); err != nil {
			return err
		}
	}
	if err := js.DeleteKeyValue(ctx, bucket); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return err
	}
	return nil
}
