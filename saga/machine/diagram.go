package machine

import (
	"strings"

	"github.com/jetsaga/jetsaga/saga"
)

// Mermaid returns the machine's state diagram as Mermaid text
// (stateDiagram-v2), drawn from its definition: each state, and for each
// event it accepts an arrow to every state its activity may transition
// to (a guarded one labelled [if] or [else]), or back to itself if it
// changes no state. Initial is entered from the start mark, Final leads
// to the end mark. Mermaid draws it (GitHub renders it in Markdown).
// The text is the same for the same definition, so a golden file can
// pin it.
func (m *Machine[S]) Mermaid() string {
	var b strings.Builder
	b.WriteString("stateDiagram-v2\n")
	b.WriteString("    [*] --> Initial\n")
	for _, st := range m.allStates() {
		for _, e := range m.edgesFrom(st) {
			label := m.label(e.event)
			if e.guard != "" {
				label += " [" + e.guard + "]"
			}
			b.WriteString("    " + st + " --> " + e.to + " : " + mermaidText(label) + "\n")
		}
	}
	b.WriteString("    Final --> [*]\n")
	return b.String()
}

// mermaidText keeps a label to characters Mermaid reads as text.
func mermaidText(s string) string {
	return strings.NewReplacer(":", " ", ";", " ", "\n", " ", "#", " ").Replace(s)
}

// stateGraph is the machine's states and transitions as data, for the
// catalog a dispatcher publishes (saga.DescribeStates): the arrows
// Mermaid draws, in the same order, each with its event's label.
func (m *Machine[S]) stateGraph() saga.StateGraph {
	g := saga.StateGraph{Initial: Initial.name, Final: Final.name, States: m.allStates()}
	for _, st := range g.States {
		for _, e := range m.edgesFrom(st) {
			g.Transitions = append(g.Transitions, saga.GraphTransition{From: st, To: e.to, Event: m.label(e.event), Guard: e.guard})
		}
	}
	return g
}
