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
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jetsaga/jetsaga/examples/emailconfirm"
	"github.com/jetsaga/jetsaga/examples/internal/demo"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
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
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	o := options{NATSURL: *url, Reminder: *reminder, Expiry: *expiry, RefuseFor: *refuseFor, Logger: logger}
	demo.Main("emailconfirm demo", func(ctx context.Context) error {
		return run(ctx, os.Stdout, o)
	})
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
	p := demo.NewPrinter(out, len("dana"))
	p.Printf("e-mail confirmation demo: reminder after %v, release after %v, late links refused for %v", o.Reminder, o.Expiry, o.RefuseFor)
	p.Printf("(production uses 30m, 1h and 7 days; set with -reminder, -expiry and -refuse-for)")

	env, stop, err := demo.Start(ctx, o.NATSURL, p, demo.Config{Prefix: prefix, Bucket: bucket, Queues: []string{signupQueue, eventsQueue}, Logger: o.Logger})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := stop(); cerr != nil && err == nil {
			err = fmt.Errorf("cleaning up: %w", cerr)
		}
	}()
	signup, err := env.Broker.OpenQueue(ctx, transport.QueueConfig{Name: signupQueue})
	if err != nil {
		return err
	}
	events, err := env.Broker.OpenQueue(ctx, transport.QueueConfig{Name: eventsQueue})
	if err != nil {
		return err
	}
	w := &watcher{p: p, q: signup, owners: make(map[owned]string)}
	flow := emailconfirm.New(emailconfirm.Config{Reminder: o.Reminder, Expiry: o.Expiry, RefuseFor: o.RefuseFor, Events: eventsQueue})
	d, err := saga.NewDispatcher(env.Broker, env.Store, signupQueue,
		saga.WithSagas(flow), saga.WithLogger(o.Logger), saga.WithHooks(saga.Hooks{StepStarted: w.stepStarted}))
	if err != nil {
		return err
	}
	w.d = d
	p.Printf("dispatcher on queue %q, state in KV bucket %q; the user's service reads %q", signupQueue, bucket, eventsQueue)
	p.Printf("")

	f := demo.NewFeed(p, events, describeEvents(p)...)
	s := &scenario{d: d, f: f, p: p, w: w, o: o}
	return demo.Play(ctx, p, d, f, s.play)
}

// describeEvents says, for each of the saga's events, whose account it is
// about and what it tells the user's service.
func describeEvents(p *demo.Printer) []demo.Decoder {
	return []demo.Decoder{
		demo.Describe(func(v emailconfirm.ConfirmationRequested) (string, string) {
			return v.Account, fmt.Sprintf("ConfirmationRequested: e-mail the link to %s, valid until %s", v.Email, p.At(v.ExpiresAt))
		}),
		demo.Describe(func(v emailconfirm.ReminderDue) (string, string) {
			return v.Account, fmt.Sprintf("ReminderDue: remind %s, the link is valid until %s", v.Email, p.At(v.ExpiresAt))
		}),
		demo.Describe(func(v emailconfirm.Confirmed) (string, string) {
			return v.Account, fmt.Sprintf("Confirmed: activate the account of %s", v.Email)
		}),
		demo.Describe(func(v emailconfirm.AccountReleased) (string, string) {
			return v.Account, fmt.Sprintf("AccountReleased: delete the account, %s is free again (link expired %s)", v.Email, p.At(v.ExpiredAt))
		}),
		demo.Describe(func(v emailconfirm.ConfirmationRefused) (string, string) {
			return v.Account, fmt.Sprintf("ConfirmationRefused{Reason: %s}: tell %s the link expired at %s and offer a new sign-up", v.Reason, v.Email, p.At(v.ExpiredAt))
		}),
	}
}

// scenario is the script the three people follow.
type scenario struct {
	d *saga.Dispatcher
	f *demo.Feed
	p *demo.Printer
	w *watcher
	o options
}

func (s *scenario) send(ctx context.Context, m any) error {
	_, err := s.d.Send(ctx, m)
	return err
}

func (s *scenario) signUp(ctx context.Context, account string) (emailconfirm.ConfirmationRequested, error) {
	email := account + "@example.com"
	s.p.Say(account, "signs up as %s", email)
	if err := s.send(ctx, emailconfirm.SignedUp{Account: account, Email: email}); err != nil {
		return emailconfirm.ConfirmationRequested{}, err
	}
	req, _, err := demo.Await[emailconfirm.ConfirmationRequested](ctx, s.f, account)
	return req, err
}

func (s *scenario) confirm(ctx context.Context, account, token string) error {
	s.p.Say(account, "follows the link")
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
	if _, _, err := demo.Await[emailconfirm.Confirmed](ctx, s.f, "dana"); err != nil {
		return err
	}
	if err := s.w.browse(ctx); err != nil {
		return err
	}

	// finn signs up a little later, so that his timeouts come apart from eve's.
	if err := demo.SleepUntil(ctx, s.p.Started().Add(s.o.Reminder/3)); err != nil {
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
	if _, _, err := demo.Await[emailconfirm.ReminderDue](ctx, s.f, "eve"); err != nil {
		return err
	}
	if err := s.confirm(ctx, "eve", eve.Token); err != nil {
		return err
	}
	if _, _, err := demo.Await[emailconfirm.Confirmed](ctx, s.f, "eve"); err != nil {
		return err
	}

	// finn ignores his reminder; his account is released; then he follows
	// the link.
	if _, _, err := demo.Await[emailconfirm.ReminderDue](ctx, s.f, "finn"); err != nil {
		return err
	}
	if _, _, err := demo.Await[emailconfirm.AccountReleased](ctx, s.f, "finn"); err != nil {
		return err
	}
	if err := s.confirm(ctx, "finn", finn.Token); err != nil {
		return err
	}
	refused, _, err := demo.Await[emailconfirm.ConfirmationRefused](ctx, s.f, "finn")
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
	p *demo.Printer
	q *transport.Queue // the dispatcher's queue
	d *saga.Dispatcher

	mu sync.Mutex
	// owners names the instance of each timeout browsed, by type and due
	// time: an activated timeout keeps its due time (StepInfo.TimeoutDue),
	// so it tells which of the listed timeouts it is.
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
	w.p.Say("", "queue %q (Queue.Browse + Dispatcher.ScheduledTimeouts):", w.q.Name())
	n := 0
	for m, err := range w.q.Browse(ctx, 0) {
		if err != nil {
			return err
		}
		n++
		due, what := "", m.Properties[saga.TypeProperty]
		if m.State == transport.Scheduled {
			// The due time; ScheduledAt is the activation time, the due time
			// less the engine's lead (early activation, on by default).
			at := m.ScheduledAt
			if d, err := time.Parse(time.RFC3339Nano, m.Properties[timeout.PropertyDue]); err == nil {
				at = d
			}
			due = "due " + w.p.At(at)
		}
		if t, ok := byseq[m.Seq]; ok {
			what = fmt.Sprintf("%s/%-4s %s", t.saga, t.id, t.typ)
		}
		w.p.Say("", "  seq=%#-15x %-9s enqueued %s  %-14s %s", m.Seq, m.State, w.p.At(m.EnqueuedAt), due, what)
	}
	if n == 0 {
		w.p.Say("", "  (empty)")
	}
	return nil
}

// stepStarted is a saga.Hooks callback: when the dispatcher starts on an
// activated timeout, it looks the message up in the queue and prints its
// sequence number, due time, enqueue time (the activation, up to the
// engine's lead before the due time: the dispatcher held it until then)
// and how late its handler starts.
func (w *watcher) stepStarted(ctx context.Context, info saga.StepInfo) context.Context {
	ms, err := w.q.Peek(ctx, info.Seq, 1)
	if err != nil || len(ms) == 0 || ms[0].Seq != info.Seq || ms[0].ScheduledAt.IsZero() {
		return ctx // not an activated scheduled message, or already gone
	}
	m := ms[0]
	w.mu.Lock()
	who := w.owners[owned{info.MessageType, info.TimeoutDue.UnixNano()}]
	w.mu.Unlock()
	w.p.Say(who, "timeout %s activated: seq=%d, due %s, enqueued %s, handled %s: %s late",
		info.MessageType, m.Seq, w.p.At(info.TimeoutDue), w.p.At(m.EnqueuedAt), w.p.At(info.StartedAt),
		info.StartedAt.Sub(info.TimeoutDue).Round(time.Millisecond))
	return ctx
}
