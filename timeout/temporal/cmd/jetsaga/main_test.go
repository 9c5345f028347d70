package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/examples/loanoffer"
	"github.com/jetsaga/jetsaga/internal/cli"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/timeout/temporal"
	"github.com/jetsaga/jetsaga/timeout/temporal/temporaltest"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// TestTemporalTimeouts runs the command against a real Temporal dev
// server and nats-server: a timeout a service scheduled on Temporal is
// listed beside one on JetStream, and sagas cancel-timeouts cancels both.
func TestTemporalTimeouts(t *testing.T) {
	ts := temporaltest.New(t, temporaltest.Options{})
	ns, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	nc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b, err := transport.NewJetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx := t.Context()
	if _, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "loans"}); err != nil {
		t.Fatal(err)
	}
	tc := ts.Client(t)
	eng, err := temporal.New(tc)
	if err != nil {
		t.Fatal(err)
	}
	// The service's worker (Cancel is answered by the timeout's workflow).
	w, err := temporal.NewWorker(tc, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	// A service: the loan offer saga, its 7- and 14-day timeouts on
	// Temporal, its 10-minute nudge on JetStream.
	jsc, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := kvstore.New(ctx, jsc, kvstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	router := &timeout.Router{Default: timeout.NewQueue(b), Routes: []timeout.Route{eng.Route(time.Hour)}}
	d, err := saga.NewDispatcher(b, store, "loans",
		saga.WithSagas(loanoffer.New(loanoffer.Config{})), saga.WithTimeouts(router))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })
	if _, err := d.Send(ctx, loanoffer.OfferMade{Offer: "L-17", Customer: "ada", Amount: 100_000}); err != nil {
		t.Fatal(err)
	}

	base := []string{"--server", ns.ClientURL(), "--temporal-address", ts.HostPort(), "--temporal-namespace", ts.Namespace()}
	list := func() []cli.PendingView {
		t.Helper()
		out, code := runCmd(t, append(base, "timeouts", "list", "--saga", "loanoffer", "--json")...)
		if code != cli.ExitOK {
			t.Fatalf("timeouts list: exit %d: %s", code, out)
		}
		var ps []cli.PendingView
		if err := json.Unmarshal([]byte(out), &ps); err != nil {
			t.Fatalf("timeouts list --json: %v: %s", err, out)
		}
		return ps
	}
	// Temporal's visibility store lists a new workflow after a moment.
	var ps []cli.PendingView
	for deadline := time.Now().Add(30 * time.Second); ; {
		ps = list()
		if len(ps) == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // polling visibility, which has no change feed
	}
	perEngine := map[string]int{}
	var refs []timeout.Ref
	for _, p := range ps {
		perEngine[p.Engine]++
		if p.ID != "L-17" || p.Saga != loanoffer.Name {
			t.Errorf("listed %+v, want saga %s instance L-17", p, loanoffer.Name)
		}
		if p.Engine == "temporal" {
			refs = append(refs, timeout.Ref(p.Ref))
			if days := time.Until(p.At).Hours() / 24; days < 6 || days > 14 {
				t.Errorf("temporal timeout due in %.1f days: %+v", days, p)
			}
		}
	}
	if len(ps) != 3 || perEngine["temporal"] != 2 || perEngine["queue"] != 1 {
		t.Fatalf("timeouts list: %+v, want the nudge on the queue and the reminder and expiry on temporal", ps)
	}

	out, code := runCmd(t, append(base, "sagas", "cancel-timeouts", "loanoffer", "L-17", "--queue", "loans", "--yes")...)
	if code != cli.ExitOK {
		t.Fatalf("sagas cancel-timeouts: exit %d: %s", code, out)
	}
	t.Logf("sagas cancel-timeouts:\n%s", out)
	for _, ref := range refs {
		if err := eng.Cancel(ctx, ref); !errors.Is(err, timeout.ErrNotFound) {
			t.Errorf("Cancel(%s) after cancel-timeouts = %v, want ErrNotFound (already cancelled)", ref, err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if ps = list(); len(ps) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(ps) != 0 {
		t.Errorf("timeouts left after cancel-timeouts: %+v", ps)
	}

	// Without the engine's address, the command says what it lacks.
	out, code = runCmd(t, "--server", ns.ClientURL(), "--temporal-address", "127.0.0.1:1", "--timeout", "2s", "timeouts", "list")
	if code == cli.ExitOK || !strings.Contains(out, "127.0.0.1:1") {
		t.Errorf("timeouts list against no Temporal: exit %d, %q", code, out)
	}
}

func runCmd(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	code := run(ctx, args, strings.NewReader(""), &out, &out, cli.WithTerminal(func(io.Reader) bool { return false }))
	return out.String(), code
}
