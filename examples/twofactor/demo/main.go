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
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/jetsaga/jetsaga/examples/internal/demo"
	"github.com/jetsaga/jetsaga/examples/twofactor"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
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
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	demo.Main("twofactor demo", func(ctx context.Context) error {
		return run(ctx, os.Stdout, options{NATSURL: *url, TTL: *ttl, Logger: logger})
	})
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
	p := demo.NewPrinter(out, len("carol"))
	p.Printf("two-factor demo: codes live %v and allow 3 attempts (production uses %v; set with -ttl)", o.TTL, productionTTL)

	env, stop, err := demo.Start(ctx, o.NATSURL, p, demo.Config{Prefix: prefix, Bucket: bucket, Queues: []string{authQueue, eventsQueue}, Logger: o.Logger})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := stop(); cerr != nil && err == nil {
			err = fmt.Errorf("cleaning up: %w", cerr)
		}
	}()
	flow := twofactor.New(twofactor.Config{TTL: o.TTL, Events: eventsQueue})
	d, err := saga.NewDispatcher(env.Broker, env.Store, authQueue, saga.WithSagas(flow), saga.WithLogger(o.Logger))
	if err != nil {
		return err
	}
	events, err := env.Broker.OpenQueue(ctx, transport.QueueConfig{Name: eventsQueue})
	if err != nil {
		return err
	}
	p.Printf("dispatcher on queue %q, state in KV bucket %q; the user's service reads %q", authQueue, bucket, eventsQueue)
	p.Printf("")

	// The dispatcher and the events consumer run until the scenario ends;
	// then the dispatcher lets the steps in flight finish and returns.
	f := demo.NewFeed(p, events, describeEvents(p)...)
	s := &scenario{d: d, f: f, p: p, ttl: o.TTL}
	return demo.Play(ctx, p, d, f, s.play)
}

// describeEvents says, for each of the saga's events, whom it is about
// and what it tells the user's service.
func describeEvents(p *demo.Printer) []demo.Decoder {
	return []demo.Decoder{
		demo.Describe(func(v twofactor.CodeIssued) (string, string) {
			return v.Login, fmt.Sprintf("CodeIssued: code %s for %s, expires %s", v.Code, v.User, p.At(v.ExpiresAt))
		}),
		demo.Describe(func(v twofactor.CodeRejected) (string, string) {
			return v.Login, fmt.Sprintf("CodeRejected: %d attempt(s) left", v.Remaining)
		}),
		demo.Describe(func(v twofactor.Verified) (string, string) {
			return v.Login, fmt.Sprintf("Verified: %s may log in", v.User)
		}),
		demo.Describe(func(v twofactor.Failed) (string, string) {
			return v.Login, fmt.Sprintf("Failed{Reason: %s}: %s may not log in", v.Reason, v.User)
		}),
	}
}

// scenario is the script the users follow.
type scenario struct {
	d   *saga.Dispatcher
	f   *demo.Feed
	p   *demo.Printer
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
	s.p.Say("ann", "requests a code")
	if err := s.send(ctx, twofactor.CodeRequested{Login: "ann", User: "ann"}); err != nil {
		return err
	}
	annCode, _, err := demo.Await[twofactor.CodeIssued](ctx, s.f, "ann")
	if err != nil {
		return err
	}
	wrong := wrongCode(annCode.Code, 1)
	s.p.Say("ann", "types %s (wrong)", wrong)
	if err := s.send(ctx, twofactor.CodeEntered{Login: "ann", Code: wrong}); err != nil {
		return err
	}
	if _, _, err := demo.Await[twofactor.CodeRejected](ctx, s.f, "ann"); err != nil {
		return err
	}
	s.p.Say("ann", "types %s", annCode.Code)
	if err := s.send(ctx, twofactor.CodeEntered{Login: "ann", Code: annCode.Code}); err != nil {
		return err
	}
	if _, _, err := demo.Await[twofactor.Verified](ctx, s.f, "ann"); err != nil {
		return err
	}

	// bob: a code, a resend a moment later, then nothing.
	s.p.Say("bob", "requests a code")
	if err := s.send(ctx, twofactor.CodeRequested{Login: "bob", User: "bob"}); err != nil {
		return err
	}
	bob1, _, err := demo.Await[twofactor.CodeIssued](ctx, s.f, "bob")
	if err != nil {
		return err
	}
	if err := s.showTimeouts(ctx); err != nil {
		return err
	}
	resendAt := bob1.ExpiresAt.Add(-s.ttl).Add(s.ttl / 5)
	if err := demo.SleepUntil(ctx, resendAt); err != nil {
		return err
	}
	s.p.Say("bob", "asks for a new code")
	if err := s.send(ctx, twofactor.CodeResendRequested{Login: "bob"}); err != nil {
		return err
	}
	bob2, _, err := demo.Await[twofactor.CodeIssued](ctx, s.f, "bob")
	if err != nil {
		return err
	}
	if err := s.showTimeouts(ctx); err != nil {
		return err
	}
	s.p.Say("bob", "the timeout due %s was cancelled; the new one is due %s", s.p.At(bob1.ExpiresAt), s.p.At(bob2.ExpiresAt))

	// carol: three wrong codes.
	s.p.Say("carol", "requests a code")
	if err := s.send(ctx, twofactor.CodeRequested{Login: "carol", User: "carol"}); err != nil {
		return err
	}
	carolCode, _, err := demo.Await[twofactor.CodeIssued](ctx, s.f, "carol")
	if err != nil {
		return err
	}
	for i := 1; i <= 3; i++ {
		wrong := wrongCode(carolCode.Code, i)
		s.p.Say("carol", "types %s (wrong)", wrong)
		if err := s.send(ctx, twofactor.CodeEntered{Login: "carol", Code: wrong}); err != nil {
			return err
		}
		if i < 3 {
			if _, _, err := demo.Await[twofactor.CodeRejected](ctx, s.f, "carol"); err != nil {
				return err
			}
		}
	}
	if _, _, err := demo.Await[twofactor.Failed](ctx, s.f, "carol"); err != nil {
		return err
	}

	// bob's first code's expiry passes without an event; the second fires.
	if time.Now().Before(bob2.ExpiresAt) {
		s.p.Say("bob", "(waiting for his code to expire at %s)", s.p.At(bob2.ExpiresAt))
	}
	quiet := bob1.ExpiresAt.Add(min(time.Second, (bob2.ExpiresAt.Sub(bob1.ExpiresAt))/2))
	if err := demo.SleepUntil(ctx, quiet); err != nil {
		return err
	}
	if time.Now().Before(bob2.ExpiresAt) {
		s.p.Say("bob", "his first code's time (%s) has passed: no event, its timeout was cancelled", s.p.At(bob1.ExpiresAt))
	}
	failed, ev, err := demo.Await[twofactor.Failed](ctx, s.f, "bob")
	if err != nil {
		return err
	}
	if failed.Reason != twofactor.ReasonExpired {
		return fmt.Errorf("bob failed for %q, want %q", failed.Reason, twofactor.ReasonExpired)
	}
	s.p.Say("bob", "the expiry was enqueued %s after the code's time", ev.EnqueuedAt.Sub(bob2.ExpiresAt).Round(time.Millisecond))
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
			s.p.Say("", "pending timeouts (Dispatcher.ScheduledTimeouts):")
		}
		n++
		s.p.Say("", "  seq=%#x  %s/%-5s  %s  due %s", st.Seq, st.Saga, st.ID, st.Type, s.p.At(st.At))
	}
	if n == 0 {
		s.p.Say("", "pending timeouts (Dispatcher.ScheduledTimeouts): none")
	}
	return nil
}

// wrongCode returns a code that differs from code: its last digit plus i.
func wrongCode(code string, i int) string {
	last := code[len(code)-1] - '0'
	return code[:len(code)-1] + string(rune('0'+(int(last)+i)%10))
}
