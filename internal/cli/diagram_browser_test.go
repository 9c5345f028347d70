package cli

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/examples/ordermachine"
	"github.com/jetsaga/jetsaga/internal/testutil"
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
	checkScreenshot(t, shot)
	if p := os.Getenv("JETSAGA_DIAGRAM_SCREENSHOT"); p != "" {
		_ = os.WriteFile(p, shot, 0o644)
	}

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
