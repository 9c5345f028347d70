package saga

import "github.com/jetsaga/jetsaga/internal/diagram"

// SVG returns the saga's diagram as a self-contained SVG document (an
// <svg> element with its namespace: no script, nothing to fetch, so a
// browser shows it as a file or inlined in a page): the states and
// transitions of Describe's graph — a machine's states, for a saga built
// by package saga/machine; a plain saga's Initial, Running and
// Completed. The drawing is the same for the same definition.
func (d *Definition[S]) SVG() string {
	return d.Describe("").Graph.SVG(d.name, DiagramHighlight{})
}

// DiagramHighlight is what StateGraph.SVG marks on the drawing.
type DiagramHighlight struct {
	// Current is the state to mark as an instance's current one.
	// Default: none.
	Current string
	// Path are the transitions an instance took, oldest first (a
	// machine's history: machine.Instance.Machine.History); their arrows
	// are drawn in red. One with an empty Event marks any arrow between
	// its two states. Default: none.
	Path []GraphTransition
	// Counts, if not nil, are the instances in each state, written in
	// each state's box (0 where absent). Default: nil, no counts.
	Counts map[string]int
}

// SVG draws g as a self-contained SVG titled title, with h marked. The
// layout is layered, top to bottom, as Graphviz's dot draws a graph:
// Initial at the top, Final at the bottom, each transition an arrow down
// through the layers between its states with its label beside it (one
// back up drawn the same way, its head at the top), one to the same
// state a loop to its right; transitions between the same two states
// share one arrow, their labels stacked. No arrow crosses a state or a
// label; a drawing wider than its box is scaled down to fit (CSS
// max-width: 100%). Every name is escaped: a
// catalog entry read from the server cannot inject markup. Each state is
// a <g class="state" data-state="NAME"> (class "current" for
// h.Current), each arrow a <g class="edge" data-from data-to> (class
// "taken" on h.Path), for a page's tests and styles to find.
func (g StateGraph) SVG(title string, h DiagramHighlight) string {
	dg := diagram.Graph{Initial: g.Initial, Final: g.Final, States: g.States}
	for _, t := range g.Transitions {
		dg.Transitions = append(dg.Transitions, diagram.Transition(t))
	}
	dh := diagram.Highlight{Current: h.Current, Counts: h.Counts}
	for _, t := range h.Path {
		dh.Path = append(dh.Path, diagram.Transition(t))
	}
	return diagram.SVG(title, dg, dh)
}
