package saga_test

import (
	"context"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/saga/queuestore"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// The code the README and the guides in docs/ quote (internal/doccheck
// checks that they quote it); TestReadmeService runs the README's.

func user(r *http.Request) string { return r.FormValue("user") }

// readmeService is the README's service: a dispatcher beside the HTTP
// handlers that start sagas.
func readmeService(ctx context.Context, url string, mux *http.ServeMux) (*transport.Broker, *saga.Dispatcher) {
	nc, _ := nats.Connect(url, transport.ReconnectForever(nil)) // + credentials, TLS: the usual nats options
	broker, _ := transport.NewJetStream(nc)
	js, _ := jetstream.New(nc)
	store, _ := kvstore.New(ctx, js, kvstore.Config{})
	d, _ := saga.NewDispatcher(broker, store, "auth", saga.WithSagas(TwoFactor))
	go func() {
		// nil after ctx ends and in-flight steps finish; an error (transport.ErrClosed)
		// only if the connection closes for good: stop, and let the supervisor restart
		if err := d.Run(ctx); err != nil {
			log.Fatal(err)
		}
	}()

	mux.HandleFunc("POST /login/{id}/code", func(w http.ResponseWriter, r *http.Request) {
		d.Send(r.Context(), CodeRequested{Login: r.PathValue("id"), User: user(r)})
	})
	return broker, d
}

// readmeEvents is the README's reader of what the saga sends.
func readmeEvents(ctx context.Context, broker *transport.Broker, letIn, tellUser func(login string)) {
	dec, _ := saga.NewDecoder(saga.JSON{}, saga.TypeOf[Verified](), saga.TypeOf[Expired]())
	events, _ := broker.Queue(ctx, "auth-events")
	for ds, err := events.Receive(ctx, 16); err == nil; ds, err = events.Receive(ctx, 16) {
		for _, del := range ds {
			v, err := dec.Decode(del.Message) // err matches saga.ErrUnknownMessage for other types
			switch v := v.(type) {
			case Verified:
				letIn(v.Login)
			case Expired:
				tellUser(v.Login)
			default:
				log.Print(err)
			}
			del.Complete(ctx)
		}
	}
}

// TestReadmeService runs the README's service on an embedded nats-server:
// a code requested over HTTP, the right code entered, the login let in.
func TestReadmeService(t *testing.T) {
	srv, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatalf("starting an embedded nats-server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	mux := http.NewServeMux()
	broker, d := readmeService(ctx, srv.ClientURL(), mux)
	web := httptest.NewServer(mux)
	defer web.Close()
	resp, err := http.PostForm(web.URL+"/login/l1/code", url.Values{"user": {"ann"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	sms, err := broker.Queue(ctx, "sms")
	if err != nil {
		t.Fatal(err)
	}
	ds, err := sms.Receive(ctx, 1)
	if err != nil {
		t.Fatalf("no code sent: %v", err)
	}
	code, err := saga.Decode[SendCode](ds[0].Message)
	if err != nil || code.User != "ann" {
		t.Fatalf("sms: %+v, %v; want a code for ann", code, err)
	}
	if _, err := d.Send(ctx, CodeEntered{Login: "l1", Code: code.Code}); err != nil {
		t.Fatal(err)
	}

	in := make(chan string, 1)
	go readmeEvents(ctx, broker, func(login string) { in <- login }, func(login string) { t.Errorf("%s told the code expired", login) })
	select {
	case login := <-in:
		if login != "l1" {
			t.Errorf("let in %q, want l1", login)
		}
	case <-ctx.Done():
		t.Fatal("the login was never let in")
	}
}

// docsEarlyActivation is the early-activation guide's snippet.
func docsEarlyActivation(broker *transport.Broker, store saga.Store) (*saga.Dispatcher, error) {
	d, _ := saga.NewDispatcher(broker, store, "auth", saga.WithSagas(TwoFactor)) // early activation on JetStream
	if d == nil {
		return nil, saga.ErrInvalidOption
	}

	// The engine as it was before: messages activate at their due time or after.
	onTime := timeout.NewQueue(broker, timeout.WithEarlyActivation(0))
	d, _ = saga.NewDispatcher(broker, store, "auth", saga.WithSagas(TwoFactor), saga.WithTimeouts(onTime))
	if d == nil {
		return nil, saga.ErrInvalidOption
	}
	return d, nil
}

func TestDocsEarlyActivation(t *testing.T) {
	broker, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	if _, err := docsEarlyActivation(broker, memstore.New()); err != nil {
		t.Fatal(err)
	}
}

// docsCluster is the cluster guide's set-up (compiled; the cluster tests
// run the same configuration on a 3-node cluster).
func docsCluster(ctx context.Context, logger *slog.Logger) error {
	nc, _ := nats.Connect("nats://n1:4222,nats://n2:4222,nats://n3:4222",
		transport.ReconnectForever(logger)) // plus credentials, TLS, ...
	broker, _ := transport.NewJetStream(nc)
	js, _ := jetstream.New(nc)

	q, _ := broker.OpenQueue(ctx, transport.QueueConfig{Name: "auth", Replicas: 3})
	store, _ := kvstore.New(ctx, js, kvstore.Config{Replicas: 3})
	d, _ := saga.NewDispatcher(broker, store, "auth",
		saga.WithSagas(TwoFactor),
		saga.WithQueueConfig(transport.QueueConfig{Name: "auth", Replicas: 3}))
	_, _ = q, d

	// One write per step: the state in the queue.
	st := queuestore.New(broker, "auth")
	d, _ = saga.NewDispatcher(broker, st, "auth",
		saga.WithSagas(TwoFactor),
		saga.WithQueueConfig(transport.QueueConfig{Name: "auth", Replicas: 3}))
	_ = d
	return nil
}

var _ = docsCluster
