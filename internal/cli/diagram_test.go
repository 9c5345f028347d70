package cli

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/examples/ordermachine"
	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// machineWorkload runs the ordermachine example (with a history of 20
// transitions) on a dispatcher of queue "orders" of an embedded server,
// its records in the bucket "machines"; the commands run against it.
func machineWorkload(t *testing.T) (*workload, *ordermachine.Order) {
	t.Helper()
	srv := testutil.StartServer(t, embedded.Options{})
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w := &workload{t: t, srv: srv, nc: nc, prefix: "OPS", bucket: "machines", queue: "orders", handled: map[string]int{}}
	if w.broker, err = transport.NewJetStream(nc, transport.WithPrefix(w.prefix), transport.WithLogger(testutil.Logger())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.broker.Close() })
	if w.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	store, err := kvstore.New(t.Context(), w.js, kvstore.Config{Bucket: w.bucket})
	if err != nil {
		t.Fatal(err)
	}
	o, err := ordermachine.New(ordermachine.Config{History: 20})
	if err != nil {
		t.Fatal(err)
	}
	if w.d, err = saga.NewDispatcher(w.broker, store, w.queue, saga.WithSagas(o.Saga), saga.WithLogger(testutil.Logger())); err != nil {
		t.Fatal(err)
	}
	testutil.RunUntilCleanup(t, w.d.Run)
	return w, o
}

// awaitDiagram waits until sagas diagram finds sagaType's catalog entry
// (the dispatcher publishes it as it starts, beside its first steps).
func awaitDiagram(w *workload, sagaType string) {
	w.t.Helper()
	testutil.Await(w.t, 15*time.Second, func() string {
		if r := w.run("sagas", "diagram", sagaType); r.code != 0 {
			return r.String()
		}
		return ""
	})
}

// TestSagasDiagram: the command prints the machine's Mermaid text as
// Machine.Mermaid draws it, an SVG with one node per state, the entry
// as documented JSON; a plain saga's diagram is Definition.Mermaid's;
// an unpublished saga is exit 3, a bad name or format exit 2.
func TestSagasDiagram(t *testing.T) {
	w, o := machineWorkload(t)
	awaitDiagram(w, "order")
	if got := w.must(0, "sagas", "diagram", "order").stdout; got != o.Machine.Mermaid() {
		t.Errorf("sagas diagram order:\n%s\nwant Machine.Mermaid:\n%s", got, o.Machine.Mermaid())
	}

	svg := w.must(0, "sagas", "diagram", "order", "--format", "svg").stdout
	states := svgStates(t, svg)
	want := o.Saga.Describe("orders").Graph.States
	if !slices.Equal(slices.Sorted(slices.Values(states)), slices.Sorted(slices.Values(want))) {
		t.Errorf("SVG state nodes %q, want %q", states, want)
	}

	v := jsonOf[DiagramView](w, 0, "sagas", "diagram", "order", "--format", "svg")
	if v.Saga != "order" || v.Kind != "machine" || v.Queue != "orders" || v.Version != 1 || v.Mermaid != o.Machine.Mermaid() ||
		v.SVG != svg || !slices.Equal(v.Graph.States, want) || len(v.Graph.Transitions) == 0 || v.Published.IsZero() {
		t.Errorf("--json: %+v", v)
	}
	doc := readJSONDoc(t)
	var raw any
	if err := json.Unmarshal([]byte(w.must(0, "sagas", "diagram", "order", "--json").stdout), &raw); err != nil {
		t.Fatal(err)
	}
	for _, alt := range doc.prints["sagas diagram"] {
		for _, e := range checkJSON(doc, raw, alt, "sagas diagram") {
			t.Errorf("--json as documented: %s", e)
		}
	}

	// A plain saga, on a second dispatcher: its flowchart.
	plain := saga.Define[struct{}]("note")
	saga.StartedBy(plain, saga.By(func(m OrderPaid) string { return m.Order }),
		func(context.Context, *saga.Context[struct{}], OrderPaid) error { return nil })
	w.dispatcher("notes", saga.WithSagas(plain))
	awaitDiagram(w, "note")
	if got := w.must(0, "sagas", "diagram", "note").stdout; got != plain.Mermaid() {
		t.Errorf("sagas diagram note:\n%s\nwant Definition.Mermaid:\n%s", got, plain.Mermaid())
	}

	r := w.must(ExitNotFound, "sagas", "diagram", "nosuch")
	if !strings.Contains(r.stderr, "no dispatcher published it") {
		t.Errorf("unpublished saga: %v", r)
	}
	w.must(0, "sagas", "diagram", "note", "--queue", "notes")
	w.must(ExitNotFound, "sagas", "diagram", "note", "--queue", "orders")
	w.must(ExitNotFound, "sagas", "diagram", "note", "--queue", "nosuchqueue")
	if _, err := w.env().catalogEntry(t.Context(), "nosuch", ""); !errors.Is(err, ErrNotFound) || !errors.Is(err, saga.ErrNoCatalogEntry) {
		t.Errorf("catalogEntry(nosuch) = %v, want ErrNotFound and saga.ErrNoCatalogEntry", err)
	}
	// An entry written by anyone who may write the queue's state: its
	// text drives no terminal, its names make no markup.
	evil := saga.CatalogEntry{Saga: "evil", Version: 1, Queue: "orders", Kind: "machine", Mermaid: "x\x1b[31mred\n",
		Graph: saga.StateGraph{Initial: "Initial", Final: "<script>alert(1)</script>",
			States:      []string{"Initial", "<script>alert(1)</script>"},
			Transitions: []saga.GraphTransition{{From: "Initial", To: "<script>alert(1)</script>", Event: "\"><img src=x>"}}}}
	if _, err := saga.PublishCatalogEntry(t.Context(), w.queueHandle("orders"), evil); err != nil {
		t.Fatal(err)
	}
	if got := w.must(0, "sagas", "diagram", "evil").stdout; strings.ContainsRune(got, 0x1b) {
		t.Errorf("an escape sequence reached the terminal: %q", got)
	}
	svg = w.must(0, "sagas", "diagram", "evil", "--format", "svg").stdout
	if states := svgStates(t, svg); len(states) != 2 || strings.Contains(svg, "<script") || strings.Contains(svg, "<img") {
		t.Errorf("hostile names: states %q\n%s", states, svg)
	}
	w.must(ExitUsage, "sagas", "diagram", "order.>")
	w.must(ExitUsage, "sagas", "diagram", "order", "--format", "png")
}

// The catalog shares a queue's state with saga/queuestore's records
// without showing as a saga type.
func TestCatalogHiddenFromSagaTypes(t *testing.T) {
	w := startWorkload(t, nil, true)
	w.send(OrderPlaced{Order: "o1"})
	awaitDiagram(w, "order")
	testutil.Await(t, 15*time.Second, func() string {
		ts := jsonOf[[]SagaType](w, 0, "sagas", "list")
		if len(ts) != 1 || ts[0].Saga != "order" {
			return "saga types " + strings.TrimSpace(w.must(0, "sagas", "list").stdout)
		}
		return ""
	})
}

// svgStates decodes svg as XML (failing on a document that is not well
// formed) and returns the data-state of each state node.
func svgStates(t *testing.T, svg string) []string {
	t.Helper()
	var states []string
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return states
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "g" {
			var cls, st string
			for _, a := range se.Attr {
				switch a.Name.Local {
				case "class":
					cls = a.Value
				case "data-state":
					st = a.Value
				}
			}
			if slices.Contains(strings.Fields(cls), "state") {
				states = append(states, st)
			}
		}
	}
}

// What a catalog entry holds is printed without the control characters
// that would drive a terminal.
func TestPrintable(t *testing.T) {
	got := printable("a\x1b]0;title\x07b\n\tc\u009bd")
	if got != "a\uFFFD]0;title\uFFFDb\n\tc\uFFFDd" {
		t.Errorf("printable = %q", got)
	}
}

// The state a record is in, as the console counts it.
func TestRecordState(t *testing.T) {
	mg := saga.StateGraph{Initial: "Initial", Final: "Final"}
	pg := saga.StateGraph{Initial: saga.PlainInitial, Final: saga.PlainCompleted}
	history := `{"machine":{"state":"Paid","history":[{"from":"Initial","to":"Open","event":"Submit","at":"2026-01-01T00:00:00Z"},{"from":"Open","to":"Paid","event":"Pay","at":"2026-01-01T00:00:01Z"}]}}`
	for _, c := range []struct {
		name      string
		kind      string
		g         saga.StateGraph
		completed bool
		data      string
		want      string
		path      int
	}{
		{"machine with history", "machine", mg, false, history, "Paid", 2},
		{"machine in Initial", "machine", mg, false, `{"machine":{}}`, "Initial", 0},
		{"machine tombstone (no data)", "machine", mg, true, "", "Final", 0},
		{"machine, data not JSON", "machine", mg, false, "", "", 0},
		{"plain running", "saga", pg, false, `{}`, "Running", 0},
		{"plain tombstone", "saga", pg, true, "", "Completed", 0},
	} {
		st, path := recordState(c.kind, c.g, c.completed, json.RawMessage(c.data))
		if st != c.want || len(path) != c.path {
			t.Errorf("%s: state %q, path %v; want %q and %d transitions", c.name, st, path, c.want, c.path)
		}
	}
}
