package saga_test

import (
	"encoding/xml"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/jetsaga/jetsaga/examples/ordermachine"
	"github.com/jetsaga/jetsaga/saga"
)

// stateNodes decodes svg as XML, failing on a document that is not well
// formed or not SVG, and returns the data-state of each state node and
// of each current one.
func stateNodes(t *testing.T, svg string) (states, current []string) {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(svg))
	first := true
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return states, current
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, svg)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if first && (se.Name.Local != "svg" || se.Name.Space != "http://www.w3.org/2000/svg") {
			t.Fatalf("root %v, want an svg element", se.Name)
		}
		first = false
		var cls, st string
		for _, a := range se.Attr {
			switch a.Name.Local {
			case "class":
				cls = a.Value
			case "data-state":
				st = a.Value
			}
		}
		if f := strings.Fields(cls); se.Name.Local == "g" && slices.Contains(f, "state") {
			states = append(states, st)
			if slices.Contains(f, "current") {
				current = append(current, st)
			}
		}
	}
}

// Definition.SVG draws a plain saga's three states, and a machine's own
// states (not the plain saga it compiles to); StateGraph.SVG marks the
// current state.
func TestDefinitionSVG(t *testing.T) {
	states, _ := stateNodes(t, counterSaga().SVG())
	if !slices.Equal(states, []string{"Initial", "Running", "Completed"}) {
		t.Errorf("plain saga: states %q", states)
	}
	o, err := ordermachine.New(ordermachine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	states, _ = stateNodes(t, o.Saga.SVG())
	if want := []string{"Initial", "Submitted", "Accepted", "Stalled", "Final"}; !slices.Equal(states, want) {
		t.Errorf("machine: states %q, want %q", states, want)
	}
	_, current := stateNodes(t, o.Saga.Describe("").Graph.SVG("order", saga.DiagramHighlight{Current: "Stalled"}))
	if !slices.Equal(current, []string{"Stalled"}) {
		t.Errorf("current %q, want Stalled", current)
	}
}
