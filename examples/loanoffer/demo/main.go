// Command demo runs the loan offer saga of package loanoffer with its
// timeouts on two engines: the short ones (the "offer viewed?" nudge) as
// JetStream scheduled messages, the long ones (the reminder and the
// expiry) as Temporal workflows, routed by a timeout.Router by their
// delay. It prints which engine holds each timeout (from
// Dispatcher.ScheduledTimeouts, which lists both), each timeout as it
// arrives, and the events the user's service receives.
//
// Three customers get an offer: ada opens and accepts it at once (her
// nudge is cancelled on JetStream, her reminder and expiry on Temporal),
// ben opens it only after the nudge and accepts after the reminder (his
// expiry is cancelled on Temporal), cy opens it and never answers (the
// offer expires). Durations are scaled down so that the demo ends in
// about 10 seconds: the nudge after 2s, the reminder after 5s, the expiry
// after 10s, and timeouts 3s or more away go to Temporal; production uses
// 10 minutes, 7 days, 14 days and, say, a day.
//
//	cd examples/loanoffer/demo && go run .
//	go run . -temporal 127.0.0.1:7233 -nats nats://127.0.0.1:4222   # servers of your own
//
// Without -nats (or $NATS_URL) the demo starts an embedded nats-server;
// without -temporal (or $TEMPORAL_ADDRESS) a Temporal dev server (the
// temporal CLI, which the first run builds from the Go module proxy into
// the user's cache directory: a few minutes, once). On shared servers the
// demo keeps apart: JetStream prefix LOANOFFER_DEMO, KV bucket
// loanoffer_demo, Temporal task queue loanoffer-demo in the namespace
// -namespace.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/jetsaga/jetsaga/examples/internal/demo"
	"github.com/jetsaga/jetsaga/examples/loanoffer"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/timeout/temporal"
	"github.com/jetsaga/jetsaga/timeout/temporal/temporaltest"
	"github.com/jetsaga/jetsaga/transport"
)

// Where the demo lives on the servers.
const (
	prefix      = "LOANOFFER_DEMO" // JetStream stream names and subjects
	bucket      = "loanoffer_demo" // KV bucket of saga state
	loansQueue  = "loans"          // the dispatcher's queue
	eventsQueue = "loan-events"    // what the user's service consumes
	taskQueue   = "loanoffer-demo" // Temporal task queue of the timeouts
)

func main() {
	o := options{}
	flag.StringVar(&o.NATSURL, "nats", os.Getenv("NATS_URL"), "NATS server URL; empty starts an embedded nats-server")
	flag.StringVar(&o.Temporal, "temporal", os.Getenv("TEMPORAL_ADDRESS"), "Temporal frontend host:port; empty starts a local dev server")
	flag.StringVar(&o.Namespace, "namespace", "default", "Temporal namespace")
	flag.DurationVar(&o.Nudge, "nudge", defaults.Nudge, "when an unopened offer is nudged (production: 10m)")
	flag.DurationVar(&o.Reminder, "reminder", defaults.Reminder, "when the reminder goes out (production: 7 days)")
	flag.DurationVar(&o.Expiry, "expiry", defaults.Expiry, "when the offer expires (production: 14 days)")
	flag.DurationVar(&o.Beyond, "temporal-beyond", defaults.Beyond, "timeouts at least this far away go to Temporal (production: a day, say)")
	flag.Parse()
	o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	demo.Main("loanoffer demo", func(ctx context.Context) error {
		return run(ctx, os.Stdout, o)
	})
}

// defaults are the demo's durations.
var defaults = options{Nudge: 2 * time.Second, Beyond: 3 * time.Second, Reminder: 5 * time.Second, Expiry: 10 * time.Second}

// options are the demo's settings.
type options struct {
	NATSURL, Temporal, Namespace string
	// Nudge, Reminder and Expiry are loanoffer.Config's; Beyond is the
	// delay from which timeouts go to Temporal. Nudge < Beyond <= Reminder
	// < Expiry.
	Nudge, Reminder, Expiry, Beyond time.Duration
	// Logger receives warnings. Default: slog.Default().
	Logger *slog.Logger
}

func run(ctx context.Context, out io.Writer, o options) (err error) {
	if !(0 < o.Nudge && o.Nudge < o.Beyond && o.Beyond <= o.Reminder && o.Reminder < o.Expiry) {
		return fmt.Errorf("want 0 < nudge (%v) < temporal-beyond (%v) <= reminder (%v) < expiry (%v)", o.Nudge, o.Beyond, o.Reminder, o.Expiry)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	p := demo.NewPrinter(out, len("ada"))
	p.Printf("loan offer demo: nudge after %v (JetStream), reminder after %v and expiry after %v (Temporal: timeouts %v or more away)",
		o.Nudge, o.Reminder, o.Expiry, o.Beyond)
	p.Printf("(production uses 10m, 7 days and 14 days; set with -nudge, -reminder, -expiry, -temporal-beyond)")

	env, stop, err := demo.Start(ctx, o.NATSURL, p, demo.Config{Prefix: prefix, Bucket: bucket, Queues: []string{loansQueue, eventsQueue}, Logger: o.Logger})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := stop(); cerr != nil && err == nil {
			err = fmt.Errorf("cleaning up: %w", cerr)
		}
	}()

	c, closeTemporal, err := connectTemporal(ctx, o, p)
	if err != nil {
		return err
	}
	defer closeTemporal()

	// The Temporal engine, and its worker, which delivers the timeouts to
	// the dispatcher's queue on the same broker. A service runs the worker
	// next to its dispatcher, or standalone.
	engine, err := temporal.New(c, temporal.WithTaskQueue(taskQueue), temporal.WithBroker(env.Broker), temporal.WithLogger(o.Logger))
	if err != nil {
		return err
	}
	worker, err := temporal.NewWorker(c, env.Broker, temporal.WithTaskQueue(taskQueue), temporal.WithLogger(o.Logger))
	if err != nil {
		return err
	}
	if err := worker.Start(); err != nil {
		return err
	}
	defer worker.Stop()
	if err := probe(ctx, engine, env.Broker, p); err != nil {
		return err
	}
	router := &timeout.Router{
		Default: timeout.NewQueue(env.Broker),            // JetStream scheduled messages
		Routes:  []timeout.Route{engine.Route(o.Beyond)}, // Temporal workflows
	}
	p.Printf("timeouts: %v or more away → Temporal (task queue %q), the others → JetStream", o.Beyond, taskQueue)

	if _, err := env.Broker.OpenQueue(ctx, transport.QueueConfig{Name: loansQueue}); err != nil {
		return err
	}
	events, err := env.Broker.OpenQueue(ctx, transport.QueueConfig{Name: eventsQueue})
	if err != nil {
		return err
	}
	w := &watcher{p: p, engines: make(map[string]string)}
	flow := loanoffer.New(loanoffer.Config{Nudge: o.Nudge, Reminder: o.Reminder, Expiry: o.Expiry, Events: eventsQueue})
	d, err := saga.NewDispatcher(env.Broker, env.Store, loansQueue,
		saga.WithSagas(flow), saga.WithTimeouts(router), saga.WithLogger(o.Logger),
		saga.WithHooks(saga.Hooks{StepStarted: w.stepStarted}))
	if err != nil {
		return err
	}
	w.d = d
	p.Printf("dispatcher on queue %q, state in KV bucket %q; the user's service reads %q", loansQueue, bucket, eventsQueue)
	p.Printf("")

	f := demo.NewFeed(p, events, describeEvents(p)...)
	s := &scenario{d: d, f: f, p: p, w: w, o: o}
	return demo.Play(ctx, p, d, f, s.play)
}

// connectTemporal dials the Temporal server o names or starts a dev
// server, and says which.
func connectTemporal(ctx context.Context, o options, p *demo.Printer) (client.Client, func(), error) {
	// The SDK logs at Warn what the demo does on purpose (polls failing
	// as the worker stops): errors only.
	copts := client.Options{HostPort: o.Temporal, Namespace: o.Namespace, Logger: tlog.NewStructuredLogger(slog.New(errorsOnly{o.Logger.Handler()}))}
	stop := func() {}
	if o.Temporal == "" {
		srv, err := temporaltest.Start(ctx, temporaltest.Options{Namespace: o.Namespace}, func(format string, args ...any) {
			p.Printf(format, args...)
		})
		if err != nil {
			return nil, nil, err
		}
		stop = func() { srv.Stop() }
		copts.HostPort = srv.HostPort()
		p.Printf("started a Temporal dev server at %s", srv.HostPort())
	} else {
		p.Printf("connected to Temporal at %s", o.Temporal)
	}
	c, err := client.DialContext(ctx, copts)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return c, func() { c.Close(); stop() }, nil
}

// probe schedules a timeout on the Temporal engine and cancels it, to
// see that the engine and its worker work before the scenario starts
// (and to warm up the connection, so that the scenario's timing holds).
func probe(ctx context.Context, engine *temporal.Engine, b *transport.Broker, p *demo.Printer) error {
	start := time.Now()
	ref, err := engine.Schedule(ctx, timeout.Timeout{
		ID: fmt.Sprintf("probe-%d", start.UnixNano()), Queue: loansQueue, At: start.Add(time.Hour), Message: &transport.Message{},
	})
	if err != nil {
		return fmt.Errorf("probing the Temporal engine: %w", err)
	}
	if err := engine.Cancel(ctx, ref); err != nil {
		return fmt.Errorf("probing the Temporal engine: %w", err)
	}
	p.Printf("Temporal engine ready: a probe timeout scheduled and cancelled in %v", time.Since(start).Round(time.Millisecond))
	return nil
}

// describeEvents says, for each of the saga's events, whose offer it is
// about and what it tells the user's service.
func describeEvents(p *demo.Printer) []demo.Decoder {
	return []demo.Decoder{
		demo.Describe(func(v loanoffer.OfferSent) (string, string) {
			return v.Customer, fmt.Sprintf("OfferSent: send offer %s for %d.%02d, valid until %s", v.Offer, v.Amount/100, v.Amount%100, p.At(v.ExpiresAt))
		}),
		demo.Describe(func(v loanoffer.NudgeDue) (string, string) {
			return v.Customer, fmt.Sprintf("NudgeDue: ask %s whether they saw offer %s", v.Customer, v.Offer)
		}),
		demo.Describe(func(v loanoffer.ReminderDue) (string, string) {
			return v.Customer, fmt.Sprintf("ReminderDue: remind %s, offer %s expires %s", v.Customer, v.Offer, p.At(v.ExpiresAt))
		}),
		demo.Describe(func(v loanoffer.LoanBooked) (string, string) {
			return v.Customer, fmt.Sprintf("LoanBooked: book the loan of offer %s", v.Offer)
		}),
		demo.Describe(func(v loanoffer.OfferExpired) (string, string) {
			return v.Customer, fmt.Sprintf("OfferExpired: offer %s lapsed at %s", v.Offer, p.At(v.ExpiredAt))
		}),
	}
}

// scenario is the script the three customers follow.
type scenario struct {
	d *saga.Dispatcher
	f *demo.Feed
	p *demo.Printer
	w *watcher
	o options
}

// offer names the offer of a customer.
func offer(customer string) string { return "offer-" + customer }

func (s *scenario) send(ctx context.Context, who, what string, m any) error {
	s.p.Say(who, "%s", what)
	_, err := s.d.Send(ctx, m)
	return err
}

func (s *scenario) play(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*s.o.Expiry+time.Minute)
	defer cancel()

	for i, who := range []string{"ada", "ben", "cy"} {
		amount := (i + 1) * 1_000_000
		if err := s.send(ctx, who, "gets a loan offer", loanoffer.OfferMade{Offer: offer(who), Customer: who, Amount: amount}); err != nil {
			return err
		}
		if _, _, err := demo.Await[loanoffer.OfferSent](ctx, s.f, who); err != nil {
			return err
		}
	}
	if err := s.w.list(ctx, 9); err != nil {
		return err
	}

	// ada opens and accepts at once: her three timeouts are cancelled, the
	// nudge on JetStream, the reminder and the expiry on Temporal.
	if err := s.send(ctx, "ada", "opens the offer", loanoffer.OfferViewed{Offer: offer("ada")}); err != nil {
		return err
	}
	if err := s.send(ctx, "ada", "accepts", loanoffer.OfferAccepted{Offer: offer("ada")}); err != nil {
		return err
	}
	if _, _, err := demo.Await[loanoffer.LoanBooked](ctx, s.f, "ada"); err != nil {
		return err
	}
	// cy opens the offer (her nudge is cancelled) and never answers.
	if err := s.send(ctx, "cy", "opens the offer", loanoffer.OfferViewed{Offer: offer("cy")}); err != nil {
		return err
	}
	if err := s.w.list(ctx, 5); err != nil {
		return err
	}

	// ben opens it only when nudged, and accepts after the reminder.
	if _, _, err := demo.Await[loanoffer.NudgeDue](ctx, s.f, "ben"); err != nil {
		return err
	}
	if err := s.send(ctx, "ben", "opens the offer", loanoffer.OfferViewed{Offer: offer("ben")}); err != nil {
		return err
	}
	if _, _, err := demo.Await[loanoffer.ReminderDue](ctx, s.f, "ben"); err != nil {
		return err
	}
	if err := s.send(ctx, "ben", "accepts", loanoffer.OfferAccepted{Offer: offer("ben")}); err != nil {
		return err
	}
	if _, _, err := demo.Await[loanoffer.LoanBooked](ctx, s.f, "ben"); err != nil {
		return err
	}
	if _, _, err := demo.Await[loanoffer.ReminderDue](ctx, s.f, "cy"); err != nil {
		return err
	}
	if err := s.w.list(ctx, 1); err != nil {
		return err
	}
	if _, _, err := demo.Await[loanoffer.OfferExpired](ctx, s.f, "cy"); err != nil {
		return err
	}
	return s.w.list(ctx, 0)
}

// watcher shows the timeouts: where each one is held, and each as it
// arrives.
type watcher struct {
	p *demo.Printer
	d *saga.Dispatcher

	mu      sync.Mutex
	engines map[string]string // instance + type → engine, as listed
}

// list prints the pending timeouts of every engine
// (Dispatcher.ScheduledTimeouts through the Router), once n are listed:
// Temporal's listing comes from its visibility store, which shows a
// change within a second or so.
func (w *watcher) list(ctx context.Context, n int) error {
	var sts []saga.ScheduledTimeout
	for {
		sts = sts[:0]
		for st, err := range w.d.ScheduledTimeouts(ctx, loanoffer.Name) {
			if err != nil {
				return err
			}
			sts = append(sts, st)
		}
		if len(sts) == n {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d timeouts to be listed (%d are): %w", n, len(sts), context.Cause(ctx))
		case <-time.After(100 * time.Millisecond):
		}
	}
	slices.SortFunc(sts, func(a, b saga.ScheduledTimeout) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.ID, b.ID))
	})
	w.p.Say("", "pending timeouts (Dispatcher.ScheduledTimeouts, every engine of the router):")
	for _, st := range sts {
		w.mu.Lock()
		w.engines[st.ID+" "+st.Type] = st.Ref.Engine()
		w.mu.Unlock()
		w.p.Say("", "  %-9s %-20s due %s  on %s", st.ID, st.Type, w.p.At(st.At), engineName(st.Ref.Engine()))
	}
	if len(sts) == 0 {
		w.p.Say("", "  (none)")
	}
	return nil
}

func engineName(e string) string {
	switch e {
	case timeout.QueueEngine:
		return "JetStream (" + e + ")"
	case temporal.DefaultEngineName:
		return "Temporal (" + e + ")"
	}
	return e
}

// stepStarted is a saga.Hooks callback: it prints each timeout as its
// handler gets it, with the engine that held it and how late it is.
func (w *watcher) stepStarted(ctx context.Context, info saga.StepInfo) context.Context {
	if info.TimeoutDue.IsZero() {
		return ctx
	}
	w.mu.Lock()
	engine := w.engines[info.ID+" "+info.MessageType]
	w.mu.Unlock()
	who := info.ID[len("offer-"):]
	// EnqueuedAt is when the message was activated: on JetStream a lead
	// before the due time (early activation), the dispatcher holding it
	// until then; StartedAt is when the handler got it.
	w.p.Say(who, "timeout %s arrived from %s: due %s, activated %s, handled %s: %s late", info.MessageType, engineName(engine),
		w.p.At(info.TimeoutDue), w.p.At(info.EnqueuedAt), w.p.At(info.StartedAt), info.StartedAt.Sub(info.TimeoutDue).Round(time.Millisecond))
	return ctx
}

// errorsOnly is a slog.Handler that passes on errors only.
type errorsOnly struct{ slog.Handler }

func (h errorsOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelError && h.Handler.Enabled(ctx, l)
}

func (h errorsOnly) WithAttrs(as []slog.Attr) slog.Handler {
	return errorsOnly{h.Handler.WithAttrs(as)}
}
func (h errorsOnly) WithGroup(name string) slog.Handler { return errorsOnly{h.Handler.WithGroup(name)} }
