// Command demo runs the e-mail confirmation saga of package emailconfirm
// against a real NATS JetStream server and shows the transport's facts as
// it goes: the sequence numbers, enqueue times and due times of the
// timeouts waiting in the dispatcher's queue (Queue.Browse and
// Dispatcher.ScheduledTimeouts), each timeout as it activates with its
// lateness, and the events the user's service receives, with theirs.
//
// Three people sign up: dana confirms at once (her reminder and release
// are cancelled), eve confirms after the reminder, finn never does — his
// account is released, and when he finally follows the link he is told it
// expired. The reminder comes after 3 seconds and the release after 6, so
// that the demo ends in about 8; production uses 30 minutes and an hour.
//
//	go run ./examples/emailconfirm/demo                            # embedded nats-server
//	go run ./examples/emailconfirm/demo -reminder 30m -expiry 1h   # production timings
//	go run ./examples/emailconfirm/demo -nats nats://127.0.0.1:4222
//
// Without -nats (or $NATS_URL) the demo starts an embedded nats-server with
// a temporary store. Saga state lives in a JetStream key-value bucket
// (saga/kvstore), timeouts are JetStream message schedules. On a shared
// server the demo stays apart from other applications: its streams carry
// the prefix EMAILCONFIRM_DEMO and its bucket is emailconfirm_demo, which
// it empties when it starts and deletes when it ends.
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

	"github.com/jetsaga/jetsaga/examples/emailconfirm"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// Where the demo lives on the server.
const (
	prefix      = "EMAILCONFIRM_DEMO" // JetStream stream names and subjects
	bucket      = "emailconfirm_demo" // KV bucket of saga state
	signupQueue = "signup"            // the dispatcher's queue
	eventsQueue = "signup-events"     // what the user's service consumes
)

func main() {
	url := flag.String("nats", os.Getenv("NATS_URL"), "NATS server URL; empty starts an embedded nats-server")
	reminder := flag.Duration("reminder", 3*time.Second, "when the reminder goes out after sign-up (production: 30m)")
	expiry := flag.Duration("expiry", 6*time.Second, "when an unconfirmed account is released (production: 1h)")
	refuseFor := flag.Duration("refuse-for", time.Minute, "how long after the release a confirmation is refused politely (production: 7 days)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	o := options{NATSURL: *url, Reminder: *reminder, Expiry: *expiry, RefuseFor: *refuseFor, Logger: logger}
	if err := run(ctx, os.Stdout, o); err != nil {
		fmt.Fprintln(os.Stderr, "emailconfirm demo:", err)
		os.Exit(1)
	}
}

// options are the demo's settings.
type options struct {
	// NATSURL is the server to use. Default: an embedded nats-server.
	NATSURL string
	// Reminder, Expiry and RefuseFor are emailconfirm.Config's. Reminder
	// and Expiry are required, Reminder shorter than Expiry.
	Reminder, Expiry, RefuseFor time.Duration
	// Logger receives the dispatcher's and transport's warnings.
	// Default: slog.Default().
	Logger *slog.Logger
}

func run(ctx context.Context, out io.Writer, o options) (err error) {
	if o.Reminder <= 0 || o.Expiry <= o.Reminder {
		return fmt.Errorf("reminder %v, expiry %v: want 0 < reminder < expiry", o.Reminder, o.Expiry)
	}
	if o.RefuseFor <= 0 {
		o.RefuseFor = o.Expiry
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	p := &printer{w: out}
	p.printf("e-mail confirmation demo: reminder after %v, release after %v, late links refused for %v", o.Reminder, o.Expiry, o.RefuseFor)
	p.printf("(production uses 30m, 1h and 7 days; set with -reminder, -expiry and -refuse-for)")

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
	signup, err := broker.OpenQueue(ctx, transport.QueueConfig{Name: signupQueue})
	if err != nil {
		return err
	}
	events, err := broker.OpenQueue(ctx, transport.QueueConfig{Name: eventsQueue})
	if err != nil {
		return err
	}
	w := &watcher{p: p, q: signup, owners: make(map[owned]string)}
	flow := emailconfirm.New(emailconfirm.Config{Reminder: o.Reminder, Expiry: o.Expiry, RefuseFor: o.RefuseFor, Events: eventsQueue})
	d, err := saga.NewDispatcher(broker, store, signupQueue,
		saga.WithSagas(flow), saga.WithLogger(o.Logger), saga.WithHooks(saga.Hooks{StepStarted: w.stepStarted}))
	if err != nil {
		return err
	}
	w.d = d
	p.printf("dispatcher on queue %q, state in KV bucket %q; the user's service reads %q", signupQueue, bucket, eventsQueue)
	p.printf("")

	bg, stopBG := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = d.Run(bg) })
	f := &feed{p: p, q: events, ch: make(chan event, 64)}
	wg.Go(func() { f.consume(bg) })

	p.start = time.Now()
	s := &scenario{d: d, f: f, p: p, w: w, o: o}
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

// scenario is the script the three people follow.
type scenario struct {
	d *saga.Dispatcher
	f *feed
	p *printer
	w *watcher
	o options
}

func (s *scenario) send(ctx context.Context, m any) error {
	_, err := s.d.Send(ctx, m)
	return err
}

func (s *scenario) signUp(ctx context.Context, account string) (emailconfirm.ConfirmationRequested, error) {
	email := account + "@example.com"
	s.p.say(account, "signs up as %s", email)
	if err := s.send(ctx, emailconfirm.SignedUp{Account: account, Email: email}); err != nil {
		return emailconfirm.ConfirmationRequested{}, err
	}
	req, _, err := await[emailconfirm.ConfirmationRequested](ctx, s.f, account)
	return req, err
}

func (s *scenario) confirm(ctx context.Context, account, token string) error {
	s.p.say(account, "follows the link")
	return s.send(ctx, emailconfirm.ConfirmEmail{Account: account, Token: token})
}

func (s *scenario) play(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*s.o.Expiry+30*time.Second)
	defer cancel()

	dana, err := s.signUp(ctx, "dana")
	if err != nil {
		return err
	}
	eve, err := s.signUp(ctx, "eve")
	if err != nil {
		return err
	}
	if err := s.w.browse(ctx); err != nil {
		return err
	}

	// dana confirms at once: her reminder and release are cancelled.
	if err := s.confirm(ctx, "dana", dana.Token); err != nil {
		return err
	}
	if _, _, err := await[emailconfirm.Confirmed](ctx, s.f, "dana"); err != nil {
		return err
	}
	if err := s.w.browse(ctx); err != nil {
		return err
	}

	// finn signs up a little later, so that his timeouts come apart from eve's.
	if err := sleepUntil(ctx, s.p.start.Add(s.o.Reminder/3)); err != nil {
		return err
	}
	finn, err := s.signUp(ctx, "finn")
	if err != nil {
		return err
	}
	if err := s.w.browse(ctx); err != nil {
		return err
	}

	// eve confirms when the reminder reaches her.
	if _, _, err := await[emailconfirm.ReminderDue](ctx, s.f, "eve"); err != nil {
		return err
	}
	if err := s.confirm(ctx, "eve", eve.Token); err != nil {
		return err
	}
	if _, _, err := await[emailconfirm.Confirmed](ctx, s.f, "eve"); err != nil {
		return err
	}

	// finn ignores his reminder; his account is released; then he follows
	// the link.
	if _, _, err := await[emailconfirm.ReminderDue](ctx, s.f, "finn"); err != nil {
		return err
	}
	if _, _, err := await[emailconfirm.AccountReleased](ctx, s.f, "finn"); err != nil {
		return err
	}
	if err := s.confirm(ctx, "finn", finn.Token); err != nil {
		return err
	}
	refused, _, err := await[emailconfirm.ConfirmationRefused](ctx, s.f, "finn")
	if err != nil {
		return err
	}
	if refused.Reason != emailconfirm.ReasonExpired {
		return fmt.Errorf("finn refused for %q, want %q", refused.Reason, emailconfirm.ReasonExpired)
	}
	return s.w.browse(ctx)
}

// watcher shows the dispatcher's queue: what waits in it, and timeouts as
// they activate.
type watcher struct {
	p *printer
	q *transport.Queue // the dispatcher's queue
	d *saga.Dispatcher

	mu sync.Mutex
	// owners names the instance of each timeout browsed, by type and due
	// time: an activated timeout keeps its ScheduledAt, so the due time
	// tells which of the listed timeouts it is.
	owners map[owned]string
}

type owned struct {
	typ string
	due int64 // UnixNano
}

// browse lists the messages waiting in the dispatcher's queue: Queue.Browse
// gives each one's state, sequence number, enqueue and due time, and
// Dispatcher.ScheduledTimeouts which saga instance a timeout belongs to.
func (w *watcher) browse(ctx context.Context) error {
	type timeoutInfo struct{ saga, id, typ string }
	byseq := make(map[uint64]timeoutInfo)
	for st, err := range w.d.ScheduledTimeouts(ctx, "") {
		if err != nil {
			return err
		}
		byseq[st.Seq] = timeoutInfo{st.Saga, st.ID, st.Type}
		w.mu.Lock()
		w.owners[owned{st.Type, st.At.UnixNano()}] = st.ID
		w.mu.Unlock()
	}
	w.p.say("", "queue %q (Queue.Browse + Dispatcher.ScheduledTimeouts):", w.q.Name())
	n := 0
	for m, err := range w.q.Browse(ctx, 0) {
		if err != nil {
			return err
		}
		n++
		due, what := "", m.Properties[saga.TypeProperty]
		if m.State == transport.Scheduled {
			due = "due " + w.p.at(m.ScheduledAt)
		}
		if t, ok := byseq[m.Seq]; ok {
			what = fmt.Sprintf("%s/%-4s %s", t.saga, t.id, t.typ)
		}
		w.p.say("", "  seq=%#-15x %-9s enqueued %s  %-14s %s", m.Seq, m.State, w.p.at(m.EnqueuedAt), due, what)
	}
	if n == 0 {
		w.p.say("", "  (empty)")
	}
	return nil
}

// stepStarted is a saga.Hooks callback: when the dispatcher starts on an
// activated timeout, it looks the message up in the queue and prints its
// sequence number, due time, enqueue time and lateness.
func (w *watcher) stepStarted(ctx context.Context, info saga.StepInfo) context.Context {
	ms, err := w.q.Peek(ctx, info.Seq, 1)
	if err != nil || len(ms) == 0 || ms[0].Seq != info.Seq || ms[0].ScheduledAt.IsZero() {
		return ctx // not an activated scheduled message, or already gone
	}
	m := ms[0]
	w.mu.Lock()
	who := w.owners[owned{info.MessageType, m.ScheduledAt.UnixNano()}]
	w.mu.Unlock()
	w.p.say(who, "timeout %s activated: seq=%d, due %s, enqueued %s: %s late",
		info.MessageType, m.Seq, w.p.at(m.ScheduledAt), w.p.at(m.EnqueuedAt), m.EnqueuedAt.Sub(m.ScheduledAt).Round(time.Millisecond))
	return ctx
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
	Account    string
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
			f.p.say(e.Account, "← %s seq=%d (enqueued %s)  %s", f.q.Name(), d.Seq, f.p.at(d.EnqueuedAt), text)
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

// await returns the next event of type M for account, keeping the others
// for later calls. Only the scenario's goroutine calls it.
func await[M any](ctx context.Context, f *feed, account string) (M, event, error) {
	match := func(e event) (M, bool) {
		m, ok := e.Body.(M)
		return m, ok && e.Account == account
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
			return zero, event{}, fmt.Errorf("waiting for %s for %s: %w", saga.MessageName[M](), account, context.Cause(ctx))
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
	case saga.MessageName[emailconfirm.ConfirmationRequested]():
		var v emailconfirm.ConfirmationRequested
		err = codec.Unmarshal(m.Body, &v)
		e.Account, e.Body = v.Account, v
		text = fmt.Sprintf("ConfirmationRequested: e-mail the link to %s, valid until %s", v.Email, p.at(v.ExpiresAt))
	case saga.MessageName[emailconfirm.ReminderDue]():
		var v emailconfirm.ReminderDue
		err = codec.Unmarshal(m.Body, &v)
		e.Account, e.Body = v.Account, v
		text = fmt.Sprintf("ReminderDue: remind %s, the link is valid until %s", v.Email, p.at(v.ExpiresAt))
	case saga.MessageName[emailconfirm.Confirmed]():
		var v emailconfirm.Confirmed
		err = codec.Unmarshal(m.Body, &v)
		e.Account, e.Body = v.Account, v
		text = fmt.Sprintf("Confirmed: activate the account of %s", v.Email)
	case saga.MessageName[emailconfirm.AccountReleased]():
		var v emailconfirm.AccountReleased
		err = codec.Unmarshal(m.Body, &v)
		e.Account, e.Body = v.Account, v
		text = fmt.Sprintf("AccountReleased: delete the account, %s is free again (link expired %s)", v.Email, p.at(v.ExpiredAt))
	case saga.MessageName[emailconfirm.ConfirmationRefused]():
		var v emailconfirm.ConfirmationRefused
		err = codec.Unmarshal(m.Body, &v)
		e.Account, e.Body = v.Account, v
		text = fmt.Sprintf("ConfirmationRefused{Reason: %s}: tell %s the link expired at %s and offer a new sign-up", v.Reason, v.Email, p.at(v.ExpiredAt))
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
	fmt.Fprintf(p.w, "%8s  %-4s  %s\n", p.at(time.Now()), who, fmt.Sprintf(format, args...))
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
	for _, q := range []string{signupQueue, eventsQueue} {
		if err := b.DeleteQueue(ctx, q); err != nil {
			return err
		}
	}
	if err := js.DeleteKeyValue(ctx, bucket); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return err
	}
	return nil
}
