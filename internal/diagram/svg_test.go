package diagram_test

import (
	"encoding/xml"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/jetsaga/jetsaga/examples/ordermachine"
	"github.com/jetsaga/jetsaga/internal/diagram"
	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func orderGraph(t testing.TB) diagram.Graph {
	t.Helper()
	o, err := ordermachine.New(ordermachine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return toGraph(o.Saga.Describe("orders").Graph)
}

// toGraph is what saga.StateGraph.SVG passes to the renderer.
func toGraph(g saga.StateGraph) diagram.Graph {
	dg := diagram.Graph{Initial: g.Initial, Final: g.Final, States: g.States}
	for _, t := range g.Transitions {
		dg.Transitions = append(dg.Transitions, diagram.Transition(t))
	}
	return dg
}

// TestGolden pins the drawing of the ordermachine example, with counts,
// a current state and a path (go test -update rewrites it; open it in a
// browser to look).
func TestGolden(t *testing.T) {
	g := orderGraph(t)
	got := diagram.SVG("order", g, diagram.Highlight{
		Current: "Accepted",
		Counts:  map[string]int{"Submitted": 3, "Accepted": 1},
		Path: []diagram.Transition{
			{From: "Initial", To: "Submitted", Event: "SubmitOrder"},
			{From: "Submitted", To: "Accepted", Event: "OrderAccepted"},
		},
	})
	testutil.Golden(t, "ordermachine.svg", got, *update)
}

// parsed is what an SVG holds, as encoding/xml reads it.
type parsed struct {
	states  []string          // data-state of each state group, in order
	classes map[string]string // state → class
	counts  map[string]string // state → data-count
	taken   [][2]string       // from, to of each edge with class taken
	edges   int
	text    string // all character data
}

// parse decodes svg as XML (failing the test if it is not well formed)
// and collects its states and edges.
func parse(t *testing.T, svg string) parsed {
	t.Helper()
	p := parsed{classes: map[string]string{}, counts: map[string]string{}}
	dec := xml.NewDecoder(strings.NewReader(svg))
	root := true
	var text strings.Builder
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, svg)
		}
		switch x := tok.(type) {
		case xml.StartElement:
			if root {
				if x.Name.Local != "svg" || x.Name.Space != "http://www.w3.org/2000/svg" {
					t.Fatalf("root element %v, want svg in the SVG namespace", x.Name)
				}
				root = false
			}
			attr := map[string]string{}
			for _, a := range x.Attr {
				attr[a.Name.Local] = a.Value
			}
			if x.Name.Local != "g" {
				continue
			}
			cls := strings.Fields(attr["class"])
			switch {
			case slices.Contains(cls, "state"):
				p.states = append(p.states, attr["data-state"])
				p.classes[attr["data-state"]] = attr["class"]
				p.counts[attr["data-state"]] = attr["data-count"]
			case slices.Contains(cls, "edge"):
				p.edges++
				if slices.Contains(cls, "taken") {
					p.taken = append(p.taken, [2]string{attr["data-from"], attr["data-to"]})
				}
			}
		case xml.CharData:
			text.Write(x)
		}
	}
	p.text = text.String()
	return p
}

// The drawing is well-formed XML with one node per state, the current
// state marked, the counts written, and exactly the path's arrows taken.
func TestWellFormedOneNodePerState(t *testing.T) {
	g := orderGraph(t)
	svg := diagram.SVG("order", g, diagram.Highlight{
		Current: "Accepted",
		Counts:  map[string]int{"Submitted": 3, "Accepted": 1},
		Path: []diagram.Transition{
			{From: "Initial", To: "Submitted", Event: "SubmitOrder"},
			{From: "Submitted", To: "Accepted", Event: "OrderAccepted"},
		},
	})
	p := parse(t, svg)
	got, want := slices.Sorted(slices.Values(p.states)), slices.Sorted(slices.Values(g.States))
	if !slices.Equal(got, want) {
		t.Errorf("state nodes %q, want one per state %q", p.states, g.States)
	}
	for _, s := range g.States {
		current := strings.Contains(p.classes[s], "current")
		if current != (s == "Accepted") {
			t.Errorf("state %s: class %q", s, p.classes[s])
		}
	}
	if p.counts["Submitted"] != "3" || p.counts["Accepted"] != "1" || p.counts["Initial"] != "0" {
		t.Errorf("counts %v", p.counts)
	}
	if !strings.Contains(p.text, "3 instances") {
		t.Errorf("no count written in the Submitted box")
	}
	wantTaken := [][2]string{{"Initial", "Submitted"}, {"Submitted", "Accepted"}}
	slices.SortFunc(p.taken, func(a, b [2]string) int { return strings.Compare(a[0]+a[1], b[0]+b[1]) })
	if !slices.Equal(p.taken, wantTaken) {
		t.Errorf("taken arrows %v, want %v", p.taken, wantTaken)
	}
	// Each transition is drawn: every event's label is in the text.
	for _, tr := range g.Transitions {
		if !strings.Contains(p.text, tr.Event) {
			t.Errorf("transition %+v has no label", tr)
		}
	}
	if p.edges == 0 {
		t.Error("no edges")
	}
}

// Names that hold markup, quotes and control characters stay text: the
// drawing is well-formed, holds no element of theirs, and every state is
// a node.
func TestHostileNames(t *testing.T) {
	bad := `<script>alert("x")</script>&amp;'` + "\x01\xff"
	g := diagram.Graph{Initial: "Initial", Final: "Final", States: []string{"Initial", bad, "Final"},
		Transitions: []diagram.Transition{
			{From: "Initial", To: bad, Event: `"><img src=x>`},
			{From: bad, To: bad, Event: "]]>"},
			{From: bad, To: "Initial", Event: "back"},
			{From: bad, To: "Final", Event: "done", Guard: "<if>"},
		}}
	svg := diagram.SVG(bad, g, diagram.Highlight{Current: bad, Counts: map[string]int{bad: 2}})
	p := parse(t, svg)
	if len(p.states) != 3 {
		t.Errorf("states %q, want 3", p.states)
	}
	if strings.Contains(svg, "<script") || strings.Contains(svg, "<img") {
		t.Errorf("markup of a name became markup:\n%s", svg)
	}
}
