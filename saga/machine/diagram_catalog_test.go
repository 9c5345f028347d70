package machine_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// A dispatcher running a machine publishes it to the catalog on a real
// server: the machine's own diagram (not the plain saga it compiles to)
// and its states and transitions, those Mermaid draws.
func TestCatalogOnJetStream(t *testing.T) {
	srv := testutil.StartServer(t, embedded.Options{})
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	broker, err := transport.NewJetStream(nc, transport.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = broker.Close() })
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := kvstore.New(t.Context(), js, kvstore.Config{Bucket: "catalog"})
	if err != nil {
		t.Fatal(err)
	}
	o := newOrderMachine(t)
	d, err := saga.NewDispatcher(broker, store, "orders", saga.WithSagas(o.def), saga.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	testutil.RunUntilCleanup(t, d.Run)
	q, err := broker.Queue(t.Context(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	var e saga.CatalogEntry
	testutil.Await(t, 10*time.Second, func() string {
		if e, err = saga.LoadCatalogEntry(t.Context(), q, "order"); err != nil {
			return err.Error()
		}
		return ""
	})
	if e.Kind != "machine" || e.Mermaid != o.m.Mermaid() || e.Queue != "orders" {
		t.Errorf("entry: kind %q, queue %q, mermaid\n%s", e.Kind, e.Queue, e.Mermaid)
	}
	g := e.Graph
	wantStates := []string{"Initial", "AwaitingPayment", "Review", "Checking", "Failed", "Final"}
	if g.Initial != "Initial" || g.Final != "Final" || len(g.States) != len(wantStates) {
		t.Fatalf("graph states = %q (initial %q, final %q), want %q", g.States, g.Initial, g.Final, wantStates)
	}
	for i, s := range wantStates {
		if g.States[i] != s {
			t.Errorf("state %d = %q, want %q", i, g.States[i], s)
		}
	}
	// One transition per arrow of the Mermaid text (testdata/order.mmd).
	want := map[saga.GraphTransition]bool{
		{From: "Initial", To: "AwaitingPayment", Event: "Submit"}:                true,
		{From: "AwaitingPayment", To: "Review", Event: "Pay", Guard: "if"}:       true,
		{From: "AwaitingPayment", To: "Checking", Event: "Pay", Guard: "else"}:   true,
		{From: "Checking", To: "Failed", Event: "StockCheck.TimeoutExpired"}:     true,
		{From: "AwaitingPayment", To: "Final", Event: "PaymentTimeout.Received"}: true,
	}
	seen := 0
	for _, tr := range g.Transitions {
		if want[tr] {
			seen++
		}
	}
	if seen != len(want) || len(g.Transitions) != 13 {
		t.Errorf("transitions = %+v: %d of the %d wanted, %d in all (want 13)", g.Transitions, seen, len(want), len(g.Transitions))
	}
}
