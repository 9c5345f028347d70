package diagram

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// randomGraph is a machine of n states (Initial first, Final last) with
// m transitions between random states, self ones and repeated pairs
// included, some with guards; names and events of random lengths.
func randomGraph(r *rand.Rand, n, m int) Graph {
	g := Graph{Initial: "Initial", Final: "Final", States: []string{"Initial"}}
	for i := range n - 2 {
		g.States = append(g.States, fmt.Sprintf("S%d%s", i, strings.Repeat("x", r.IntN(12))))
	}
	g.States = append(g.States, "Final")
	for range m {
		t := Transition{From: g.States[r.IntN(n)], To: g.States[r.IntN(n)], Event: "E" + strings.Repeat("e", r.IntN(30))}
		if r.IntN(4) == 0 {
			t.Guard = "if"
		}
		g.Transitions = append(g.Transitions, t)
	}
	return g
}

// laidOut lays g out as SVG does and returns its layers.
func laidOut(g Graph) [][]*elem {
	nodes := map[string]*node{}
	var states []string
	for _, s := range g.States {
		if nodes[s] == nil {
			nodes[s] = &node{name: s, w: textW(s) + 2*nodePadX, h: nodeH}
			states = append(states, s)
		}
	}
	var arrows []*arrow
	byPair := map[[2]string]*arrow{}
	for _, t := range g.Transitions {
		if t.From == t.To {
			nodes[t.From].loops = append(nodes[t.From].loops, label{text: t.Event})
			nodes[t.From].loopW = loopReach + labelPad + labelsW(nodes[t.From].loops)
			continue
		}
		a := byPair[[2]string{t.From, t.To}]
		if a == nil {
			a = &arrow{from: t.From, to: t.To}
			byPair[[2]string{t.From, t.To}] = a
			arrows = append(arrows, a)
		}
		a.labels = append(a.labels, label{text: t.Event})
		a.labelW = labelsW(a.labels)
	}
	rank(g, nodes, states, arrows)
	layers := build(states, nodes, arrows)
	order(layers)
	place(layers)
	return layers
}

// The layout's invariants, on random graphs: every arrow runs down
// through one element in each layer between its states, Initial is in
// the first layer and the final state alone in the last, and within a layer no two footprints (a
// state's box with its loops, a label beside its line, a line) meet:
// what makes a drawing without overlaps.
func TestLayoutInvariantsRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(44, 6))
	for i := range 300 {
		n, m := 2+r.IntN(16), r.IntN(40)
		g := randomGraph(r, n, m)
		layers := laidOut(g)
		for l, layer := range layers {
			for p, e := range layer {
				if e.layer != l || e.pos != p {
					t.Fatalf("graph %d: element at layer %d, %d says %d, %d", i, l, p, e.layer, e.pos)
				}
				if e.kind == kNode && e.node.name == "Initial" && l != 0 {
					t.Errorf("graph %d: Initial in layer %d", i, l)
				}
				if e.kind == kNode && e.node.name == "Final" && (l != len(layers)-1 || len(layer) != 1) {
					t.Errorf("graph %d: Final in layer %d of %d, with %d elements", i, l, len(layers), len(layer))
				}
				if p > 0 {
					prev := layer[p-1]
					if gap := (e.x - e.left) - (prev.x + prev.right); gap < prev.sep(e)-0.01 {
						t.Errorf("graph %d, layer %d: elements %d and %d %.2f px apart, want %v", i, l, p-1, p, gap, prev.sep(e))
					}
				}
				if e.x-e.left < -0.01 {
					t.Errorf("graph %d, layer %d: element %d starts at %.2f", i, l, p, e.x-e.left)
				}
			}
		}
		for _, layer := range layers {
			for _, e := range layer {
				if e.kind != kNode {
					continue
				}
				for _, d := range e.down {
					a := d.arrow
					if a == nil || a.top != e || len(a.elems) != a.bottom.layer-e.layer-1 {
						t.Fatalf("graph %d: an arrow from layer %d does not run through each layer to its end", i, e.layer)
					}
					for k, x := range a.elems {
						if x.layer != e.layer+1+k {
							t.Fatalf("graph %d: arrow %s>%s element %d in layer %d", i, a.from, a.to, k, x.layer)
						}
					}
				}
			}
		}
	}
}

// Graphs at the edges: none, one state, no Initial, Initial as Final,
// states no transition reaches, transitions from Final: each draws
// every state once.
func TestLayoutEdgeCases(t *testing.T) {
	for name, g := range map[string]Graph{
		"empty":            {},
		"one state":        {Initial: "Initial", Final: "Final", States: []string{"Initial"}},
		"no initial":       {Initial: "Initial", Final: "Final", States: []string{"A", "B"}, Transitions: []Transition{{From: "A", To: "B", Event: "x"}}},
		"initial is final": {Initial: "S", Final: "S", States: []string{"S", "T"}, Transitions: []Transition{{From: "S", To: "T", Event: "x"}, {From: "T", To: "S", Event: "y"}}},
		"unreachable":      {Initial: "Initial", Final: "Final", States: []string{"Initial", "Lost", "Final", "Orphan"}, Transitions: []Transition{{From: "Initial", To: "Final", Event: "x"}, {From: "Lost", To: "Final", Event: "y"}}},
		"out of final":     {Initial: "Initial", Final: "Final", States: []string{"Initial", "A", "Final"}, Transitions: []Transition{{From: "Initial", To: "Final", Event: "x"}, {From: "Final", To: "A", Event: "y"}, {From: "A", To: "Final", Event: "z"}, {From: "Final", To: "Final", Event: "w"}}},
		"unknown states":   {Initial: "Initial", Final: "Final", States: []string{"Initial", "Final"}, Transitions: []Transition{{From: "Initial", To: "Nowhere", Event: "x"}}},
	} {
		svg := SVG(name, g, Highlight{Counts: map[string]int{}})
		for _, s := range g.States {
			if n := strings.Count(svg, `data-state="`+s+`"`); n != 1 {
				t.Errorf("%s: state %s drawn %d times", name, s, n)
			}
		}
		if !strings.HasSuffix(svg, "</svg>\n") {
			t.Errorf("%s: not a whole drawing:\n%s", name, svg)
		}
	}
}

// BenchmarkDrawRandom draws random machines larger than the examples:
// 15 states with 35 transitions, 50 with 150.
func BenchmarkDrawRandom(b *testing.B) {
	for _, size := range [][2]int{{15, 35}, {50, 150}} {
		g := randomGraph(rand.New(rand.NewPCG(1, 2)), size[0], size[1])
		b.Run(fmt.Sprintf("states=%d/transitions=%d", size[0], size[1]), func(b *testing.B) {
			for b.Loop() {
				_ = SVG("random", g, Highlight{})
			}
		})
	}
}
