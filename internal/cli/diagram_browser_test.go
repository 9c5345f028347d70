package cli

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/examples/emailconfirm"
	"github.com/jetsaga/jetsaga/examples/loanoffer"
	"github.com/jetsaga/jetsaga/examples/ordermachine"
	"github.com/jetsaga/jetsaga/examples/renewal"
	"github.com/jetsaga/jetsaga/examples/twofactor"
	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
)

// TestConsoleDiagramBrowser drives the console in chromium on the
// ordermachine example: the saga page draws every state with the number
// of instances in it, and an instance's page highlights its current
// state and the transitions its history recorded.
func TestConsoleDiagramBrowser(t *testing.T) {
	w, _ := machineWorkload(t)
	for _, id := range []string{"o1", "o2", "o3"} {
		w.send(ordermachine.SubmitOrder{OrderID: id, Customer: "c-" + id, OrderDate: time.Now()})
	}
	machineState := func(id string) string {
		r := w.run("sagas", "show", "order", id, "--json")
		if r.code != 0 {
			return ""
		}
		var v struct {
			Data struct {
				Machine struct{ State string } `json:"machine"`
			} `json:"data"`
		}
		_ = json.Unmarshal([]byte(r.stdout), &v)
		return v.Data.Machine.State
	}
	testutil.Await(t, 15*time.Second, func() string {
		for _, id := range []string{"o1", "o2", "o3"} {
			if st := machineState(id); st != "Submitted" {
				return id + " in " + st
			}
		}
		return ""
	})
	w.send(ordermachine.OrderAccepted{OrderID: "o1"})
	testutil.AwaitTrue(t, 15*time.Second, "o1 accepted", func() bool { return machineState("o1") == "Accepted" })
	awaitDiagram(w, "order")

	srv := w.console("", false)
	b := startBrowser(t)
	is := func(path string) func(string) bool {
		return func(href string) bool { return href == srv.URL+path }
	}

	b.navigate(srv.URL+"/sagas/order", is("/sagas/order"))
	// The table's state column says each instance's machine state.
	if got, want := b.evalString(`[...document.querySelectorAll("#instances tr.inst")].map(r => r.cells[0].innerText + "=" + r.cells[1].innerText).join(",")`),
		"o1=Accepted,o2=Submitted,o3=Submitted"; got != want {
		t.Errorf("instances table states %q, want %q", got, want)
	}
	states := b.evalString(`[...document.querySelectorAll("#diagram svg g.state")].map(g => g.dataset.state).join(",")`)
	if states != "Initial,Submitted,Accepted,Stalled,Final" {
		t.Errorf("states drawn: %q\n%s", states, b.evalString(`document.body.innerText`))
	}
	// Drawn, not only present: each box has a size on the page.
	if n := b.evalInt(`[...document.querySelectorAll("#diagram svg g.state rect")].filter(r => r.getBoundingClientRect().width > 20).length`); n != 5 {
		t.Errorf("%d state boxes drawn with a width, want 5", n)
	}
	counts := b.evalString(`[...document.querySelectorAll("#diagram svg g.state")].map(g => g.dataset.state + "=" + g.querySelector("text.count").textContent).join(",")`)
	if want := "Initial=0 instances,Submitted=2 instances,Accepted=1 instance,Stalled=0 instances,Final=0 instances"; counts != want {
		t.Errorf("counts %q, want %q", counts, want)
	}
	if got := b.evalString(`document.querySelector("#counted").innerText`); !strings.Contains(got, "from 3 of 3 records") {
		t.Errorf("counted note: %q", got)
	}
	shot := b.screenshot()
	checkScreenshot(t, shot, true)
	if p := os.Getenv("JETSAGA_DIAGRAM_SCREENSHOT"); p != "" {
		_ = os.WriteFile(p, shot, 0o644)
	}
	// On a page 1,400 px wide the drawing fits, with nothing overlapping.
	b.resize(1400, 900)
	if o := overlaps(t, b, "#diagram svg"); len(o) > 0 {
		t.Errorf("saga page at 1400 px: the drawing overlaps:\n\t%s", strings.Join(o, "\n\t"))
	}
	b.resize(1200, 900)

	path := func() []string {
		s := b.evalString(`[...document.querySelectorAll("#diagram svg g.edge.taken")].map(e => e.dataset.from + ">" + e.dataset.to).join(",")`)
		p := strings.Split(s, ",")
		slices.Sort(p)
		return p
	}
	b.navigate(srv.URL+"/sagas/order/o1", is("/sagas/order/o1"))
	if got := b.evalString(`[...document.querySelectorAll("#diagram svg g.state.current")].map(g => g.dataset.state).join(",")`); got != "Accepted" {
		t.Errorf("o1: current state %q, want Accepted", got)
	}
	if got, want := path(), []string{"Initial>Submitted", "Submitted>Accepted"}; !slices.Equal(got, want) {
		t.Errorf("o1: taken %q, want %q", got, want)
	}
	if o := overlaps(t, b, "#diagram svg"); len(o) > 0 {
		t.Errorf("o1's page: the drawing overlaps:\n\t%s", strings.Join(o, "\n\t"))
	}
	// Highlighted as the eye sees it: the taken arrows' computed colour.
	if got := b.evalString(`getComputedStyle(document.querySelector("#diagram svg g.edge.taken path")).stroke`); got != "rgb(214, 40, 40)" {
		t.Errorf("taken arrow stroke %q", got)
	}
	if got := b.evalString(`getComputedStyle(document.querySelector("#diagram svg g.state.current rect")).fill`); got != "rgb(255, 224, 138)" {
		t.Errorf("current state fill %q", got)
	}
	if got := b.evalString(`document.querySelector("#machine-state").innerText`); got != "Accepted" {
		t.Errorf("machine state row %q", got)
	}
	b.navigate(srv.URL+"/sagas/order/o2", is("/sagas/order/o2"))
	if got := b.evalString(`document.querySelector("#diagram svg g.state.current").dataset.state`); got != "Submitted" {
		t.Errorf("o2: current state %q", got)
	}
	if got, want := path(), []string{"Initial>Submitted"}; !slices.Equal(got, want) {
		t.Errorf("o2: taken %q, want %q", got, want)
	}
}

// overlapsJS measures the drawing of the SVG a CSS selector finds, as the
// browser laid it out (getBBox in the drawing's units, sampled points of
// each edge's path), and returns what overlaps, one line each: an edge
// through a state's box or a label (its own included), a label touching
// a state's box or overlapping another label, two state boxes meeting,
// and any box or label outside the viewport (it would be cut off or
// need scrolling). An empty list is a clean drawing.
const overlapsJS = `((sel) => {
  const svg = document.querySelector(sel);
  if (!svg) return ["no drawing at " + sel];
  const out = [];
  const box = (b, pad) => ({l: b.x - pad, t: b.y - pad, r: b.x + b.width + pad, b: b.y + b.height + pad});
  const meet = (a, b) => a.l < b.r && b.l < a.r && a.t < b.b && b.t < a.b;
  const inside = (p, r) => p.x > r.l && p.x < r.r && p.y > r.t && p.y < r.b;
  const states = [...svg.querySelectorAll("g.state")].map(g => ({name: g.dataset.state, rect: g.querySelector("rect")}));
  states.forEach(s => s.box = box(s.rect.getBBox(), 0));
  const labels = [...svg.querySelectorAll("g.edge text")].map(t => ({
    edge: t.parentNode.dataset.from + ">" + t.parentNode.dataset.to, text: t.textContent, el: t, box: box(t.getBBox(), 0)}));
  for (const g of svg.querySelectorAll("g.edge")) {
    const name = g.dataset.from + ">" + g.dataset.to;
    const path = g.querySelector("path");
    const len = path.getTotalLength();
    const hit = new Set();
    for (let d = 0; d <= len; d += 1) {
      const p = path.getPointAtLength(d);
      for (const s of states) {
        // 2 px inside the border: an edge starts and ends on its states' borders.
        if (inside(p, box({x: s.box.l + 2, y: s.box.t + 2, width: s.box.r - s.box.l - 4, height: s.box.b - s.box.t - 4}, 0)) && !hit.has("s" + s.name)) {
          hit.add("s" + s.name);
          out.push("edge " + name + " runs through state " + s.name + " at " + Math.round(p.x) + "," + Math.round(p.y));
        }
      }
      for (const l of labels) {
        if (inside(p, l.box) && !hit.has("l" + l.text)) {
          hit.add("l" + l.text);
          out.push("edge " + name + " runs through the label " + JSON.stringify(l.text) + " (of " + l.edge + ") at " + Math.round(p.x) + "," + Math.round(p.y));
        }
      }
    }
  }
  for (const l of labels) {
    for (const s of states) {
      if (meet(box(l.el.getBBox(), 2), box(s.rect.getBBox(), 1))) out.push("label " + JSON.stringify(l.text) + " (of " + l.edge + ") touches state " + s.name);
    }
  }
  labels.forEach((a, i) => labels.slice(i + 1).forEach(b => {
    if (meet(a.box, b.box)) out.push("labels " + JSON.stringify(a.text) + " and " + JSON.stringify(b.text) + " overlap");
  }));
  states.forEach((a, i) => states.slice(i + 1).forEach(b => {
    if (meet(a.box, b.box)) out.push("states " + a.name + " and " + b.name + " overlap");
  }));
  const vw = document.documentElement.clientWidth;
  for (const el of svg.querySelectorAll("g.state rect, g.edge text")) {
    const r = el.getBoundingClientRect();
    if (r.left < 0 || r.right > vw) {
      const what = el.tagName == "rect" ? "state " + el.parentNode.dataset.state : "label " + JSON.stringify(el.textContent);
      out.push(what + " lies outside the " + vw + " px viewport (" + Math.round(r.left) + " to " + Math.round(r.right) + ")");
    }
  }
  return out;
})`

// overlaps runs overlapsJS on the drawing at sel in b's page.
func overlaps(t *testing.T, b *browser, sel string) []string {
	t.Helper()
	var out []string
	if err := json.Unmarshal(b.eval(overlapsJS+"("+strconv.Quote(sel)+")"), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// largeGraph is a synthetic machine larger than the examples: fifteen
// states, back and skipping transitions, guards, self transitions, and
// several events between one pair of states.
func largeGraph() saga.StateGraph {
	g := saga.StateGraph{Initial: "Initial", Final: "Final", States: []string{"Initial", "Draft", "Submitted", "UnderReview",
		"AwaitingPayment", "PaymentFailed", "Paid", "Packing", "Shipped", "InTransit", "Delivered", "Returned", "Refunded", "Cancelled", "Final"}}
	for _, t := range [][4]string{
		{"Initial", "Draft", "CreateOrder", ""},
		{"Draft", "Draft", "EditOrder", ""},
		{"Draft", "Submitted", "SubmitOrder", ""},
		{"Draft", "Cancelled", "CancelOrder", ""},
		{"Submitted", "UnderReview", "ReviewStarted", ""},
		{"Submitted", "AwaitingPayment", "ReviewSkipped", "low value"},
		{"UnderReview", "AwaitingPayment", "ReviewPassed", ""},
		{"UnderReview", "Draft", "ReviewFailed", "fixable"},
		{"UnderReview", "Cancelled", "ReviewFailed", "else"},
		{"AwaitingPayment", "Paid", "PaymentReceived", ""},
		{"AwaitingPayment", "PaymentFailed", "PaymentDeclined", ""},
		{"AwaitingPayment", "PaymentFailed", "PaymentTimeout.Received", ""},
		{"PaymentFailed", "AwaitingPayment", "RetryPayment", "if"},
		{"PaymentFailed", "Cancelled", "RetryPayment", "else"},
		{"Paid", "Packing", "WarehouseAccepted", ""},
		{"Paid", "Refunded", "CustomerCancelled", ""},
		{"Packing", "Packing", "ItemPicked", ""},
		{"Packing", "Packing", "PackingTimeout.Received", "if"},
		{"Packing", "Shipped", "ParcelHandedOver", ""},
		{"Shipped", "InTransit", "CarrierScan", ""},
		{"InTransit", "InTransit", "CarrierScan", ""},
		{"InTransit", "Delivered", "DeliveryConfirmed", ""},
		{"InTransit", "Returned", "DeliveryFailed", ""},
		{"Delivered", "Returned", "ReturnRequested", ""},
		{"Delivered", "Final", "ReturnWindow.Received", ""},
		{"Returned", "Refunded", "RefundIssued", ""},
		{"Refunded", "Final", "RefundSettled", ""},
		{"Cancelled", "Final", "Archive", ""},
		{"Submitted", "Final", "OrderCompletionTimeout.Received", ""},
		{"Paid", "Final", "OrderCompletionTimeout.Received", ""},
		{"Shipped", "Final", "OrderCompletionTimeout.Received", ""},
	} {
		g.Transitions = append(g.Transitions, saga.GraphTransition{From: t[0], To: t[1], Event: t[2], Guard: t[3]})
	}
	return g
}

// wideGraph is a machine wider than a page: sixteen states side by side,
// which the browser scales down to fit.
func wideGraph() saga.StateGraph {
	g := saga.StateGraph{Initial: "Initial", Final: "Final", States: []string{"Initial"}}
	for i := range 16 {
		s := fmt.Sprintf("Region%02dPending", i)
		g.States = append(g.States, s)
		g.Transitions = append(g.Transitions,
			saga.GraphTransition{From: "Initial", To: s, Event: fmt.Sprintf("Region%02dOpened", i)},
			saga.GraphTransition{From: s, To: "Final", Event: "Closed"})
	}
	g.States = append(g.States, "Final")
	return g
}

// randomMachine is a machine of twelve states with thirty transitions
// drawn at random (seeded): self ones, repeated pairs, back and skipping
// arrows, labels of random lengths.
func randomMachine(seed uint64) saga.StateGraph {
	r := rand.New(rand.NewPCG(seed, 44))
	g := saga.StateGraph{Initial: "Initial", Final: "Final", States: []string{"Initial"}}
	for i := range 10 {
		g.States = append(g.States, "State"+strconv.Itoa(i)+strings.Repeat("n", r.IntN(10)))
	}
	g.States = append(g.States, "Final")
	for range 30 {
		from, to := g.States[r.IntN(len(g.States))], g.States[r.IntN(len(g.States))]
		g.Transitions = append(g.Transitions, saga.GraphTransition{From: from, To: to, Event: "Event" + strings.Repeat("v", r.IntN(25))})
	}
	return g
}

// TestDiagramLayoutBrowser draws the examples' diagrams (the order
// machine, with counts and with an instance's path; the plain sagas) and
// a larger synthetic machine in chromium, 1,400 px wide, and fails on
// any overlap overlapsJS finds. JETSAGA_DIAGRAM_SCREENSHOTS=DIR writes a
// screenshot of each to DIR, to look at.
func TestDiagramLayoutBrowser(t *testing.T) {
	o, err := ordermachine.New(ordermachine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	order := o.Saga.Describe("orders").Graph
	cases := []struct {
		name string
		svg  string
	}{
		{"order", order.SVG("order", saga.DiagramHighlight{Counts: map[string]int{"Submitted": 3, "Accepted": 1}})},
		{"order-instance", order.SVG("order", saga.DiagramHighlight{Current: "Stalled", Path: []saga.GraphTransition{
			{From: "Initial", To: "Submitted"}, {From: "Submitted", To: "Accepted"}, {From: "Accepted", To: "Stalled"}}})},
		{"emailconfirm", emailconfirm.New(emailconfirm.Config{}).SVG()},
		{"twofactor", twofactor.New(twofactor.Config{}).SVG()},
		{"loanoffer", loanoffer.New(loanoffer.Config{}).SVG()},
		{"renewal", renewal.New(renewal.Config{}).SVG()},
		{"large", largeGraph().SVG("large", saga.DiagramHighlight{Counts: map[string]int{"Packing": 12}})},
		{"wide", wideGraph().SVG("wide", saga.DiagramHighlight{})},
	}
	for seed := range uint64(4) {
		cases = append(cases, struct {
			name string
			svg  string
		}{fmt.Sprintf("random%d", seed), randomMachine(seed).SVG("random", saga.DiagramHighlight{})})
	}
	b := startBrowser(t)
	b.resize(1400, 900)
	dir := os.Getenv("JETSAGA_DIAGRAM_SCREENSHOTS")
	for _, c := range cases {
		page := `<!doctype html><html><head><meta charset="utf-8"></head><body style="margin:8px">` +
			`<div class="diagram" style="overflow:auto;max-width:100%">` + c.svg + `</div></body></html>`
		b.navigate("data:text/html;base64,"+base64.StdEncoding.EncodeToString([]byte(page)), func(href string) bool { return strings.HasPrefix(href, "data:") })
		if got := b.evalInt(`document.querySelectorAll("svg g.state").length`); got == 0 {
			t.Fatalf("%s: no states drawn", c.name)
		}
		if o := overlaps(t, b, "svg"); len(o) > 0 {
			t.Errorf("%s: the drawing overlaps:\n\t%s", c.name, strings.Join(o, "\n\t"))
		}
		if dir != "" {
			h := b.evalInt(`Math.ceil(document.documentElement.scrollHeight)`)
			b.resize(1400, h)
			if err := os.WriteFile(filepath.Join(dir, c.name+".png"), b.screenshot(), 0o644); err != nil {
				t.Fatal(err)
			}
			b.resize(1400, 900)
		}
	}
}
