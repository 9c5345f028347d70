package sagaotel_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/saga/sagaotel"
	"github.com/jetsaga/jetsaga/timeout/schedule"
	"github.com/jetsaga/jetsaga/transport"
)

type CodeRequested struct{ Login, User string }

// TwoFactor stands for the guide's saga: it starts on CodeRequested.
var TwoFactor = saga.Define[struct{}]("twofactor")

func init() {
	saga.StartedBy(TwoFactor, saga.By(func(m CodeRequested) string { return m.Login }),
		func(ctx context.Context, c *saga.Context[struct{}], m CodeRequested) error { return nil })
}

// docsTelemetry is the snippet of docs/operating.md (internal/doccheck
// checks that the guide quotes it): a dispatcher with telemetry, and an
// HTTP handler whose request's trace goes on into the saga.
func docsTelemetry(broker *transport.Broker, store saga.Store) (http.Handler, error) {
	tel, err := sagaotel.New() // or sagaotel.WithTracerProvider(tp), WithMeterProvider(mp), WithPropagator(p)
	if err != nil {
		return nil, err
	}
	d, err := saga.NewDispatcher(broker, store, "auth", saga.WithSagas(TwoFactor), saga.WithHooks(tel.Hooks()))
	if err != nil {
		return nil, err
	}
	tel.ObservePendingTimeouts(d) // optional gauge, see below
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, user := r.PathValue("id"), r.FormValue("user")
		// in an HTTP handler: the request's trace goes on into the saga
		d.Send(r.Context(), CodeRequested{Login: id, User: user}, tel.Propagate(r.Context())...)
	}), nil
}

// TestDocsTelemetry runs the guide's snippet: the handler sends the
// starting message to the dispatcher's queue.
func TestDocsTelemetry(t *testing.T) {
	broker, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	h, err := docsTelemetry(broker, memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /login/{id}/code", h)
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/login/l1/code?user=ann", nil))
	q, err := broker.Queue(t.Context(), "auth")
	if err != nil {
		t.Fatal(err)
	}
	ds, err := q.Receive(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	m, err := saga.Decode[CodeRequested](ds[0].Message)
	if err != nil || m != (CodeRequested{Login: "l1", User: "ann"}) {
		t.Errorf("sent %+v, %v; want l1 for ann", m, err)
	}
}

// docsScheduleTelemetry is the snippet of docs/schedules.md (internal/doccheck
// checks that the guide quotes it): a scheduler whose occurrences are
// counted. TestScheduleHooks runs it.
func docsScheduleTelemetry(b *transport.Broker, tel *sagaotel.Telemetry) (*schedule.Scheduler, error) {
	hooks, err := tel.ScheduleHooks() // jetsaga.schedule.occurrences, jetsaga.schedule.lateness
	if err != nil {
		return nil, err
	}
	return schedule.New(b, schedule.WithHooks(hooks))
}
