package diagram

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Graph is what to draw: states and the transitions between them.
type Graph struct {
	Initial, Final string
	States         []string
	Transitions    []Transition
}

// Transition is one arrow; Guard, if set, is written after the event.
type Transition struct {
	From, To, Event, Guard string
}

// Highlight is what to mark on the drawing.
type Highlight struct {
	// Current is the state to mark as an instance's current one (class
	// "current"); empty for none.
	Current string
	// Path are the transitions an instance took (its history, oldest
	// first): their arrows get class "taken". A transition with an empty
	// Event marks any arrow between its two states.
	Path []Transition
	// Counts, if not nil, are the instances in each state, written in
	// each state's box (0 where absent).
	Counts map[string]int
}

// Drawing constants, in pixels.
const (
	charW      = 7.2 // average advance of the 13 px sans-serif text
	labelCharW = 6.6 // of the 11 px labels, generously
	nodeH      = 36
	countH     = 16 // added to a node with a count line
	nodePadX   = 14
	lineH      = 14 // a label's line
	portInset  = 10 // arrows leave and enter a box this far from its corners
	portStep   = 14 // at most this far apart
	margin     = 24
)

type node struct {
	name  string
	rank  int
	w, h  float64
	loops []label // self transitions
	loopW float64 // room right of the box for the loops and their labels
}

type label struct {
	text  string
	taken bool
}

// arrow is the transitions from one state to another, drawn as one.
type arrow struct {
	from, to string
	labels   []label
	labelW   float64
	taken    bool
	up       bool    // drawn from the target (above) down to the source
	elems    []*elem // in the layers between its ends, top to bottom
	top      *elem
	bottom   *elem
}

func textW(s string) float64 { return float64(utf8.RuneCountInString(s)) * charW }

func labelsW(ls []label) float64 {
	w := 0.0
	for _, l := range ls {
		w = max(w, float64(utf8.RuneCountInString(l.text))*labelCharW)
	}
	return w
}

// SVG returns g drawn as an SVG document (an <svg> element, with its
// namespace, ready to inline in HTML or save as a .svg file), titled
// title. Its width and height are the drawing's; in a narrower box a
// browser scales it down to fit (max-width: 100%).
func SVG(title string, g Graph, h Highlight) string {
	nodes := map[string]*node{}
	var states []string
	for _, s := range g.States {
		if nodes[s] == nil {
			nodes[s] = &node{name: s}
			states = append(states, s)
		}
	}
	taken := func(t Transition) bool {
		return slices.ContainsFunc(h.Path, func(p Transition) bool {
			return p.From == t.From && p.To == t.To && (p.Event == "" || p.Event == t.Event)
		})
	}
	// Group transitions by pair of states, in the graph's order.
	var arrows []*arrow
	byPair := map[[2]string]*arrow{}
	for _, t := range g.Transitions {
		if nodes[t.From] == nil || nodes[t.To] == nil {
			continue
		}
		text := t.Event
		if t.Guard != "" {
			text += " [" + t.Guard + "]"
		}
		l := label{text: text, taken: taken(t)}
		if t.From == t.To {
			nodes[t.From].loops = append(nodes[t.From].loops, l)
			continue
		}
		k := [2]string{t.From, t.To}
		a := byPair[k]
		if a == nil {
			a = &arrow{from: t.From, to: t.To}
			byPair[k] = a
			arrows = append(arrows, a)
		}
		a.labels = append(a.labels, l)
		a.taken = a.taken || l.taken
	}
	for _, n := range nodes {
		n.w = textW(n.name) + 2*nodePadX
		n.h = nodeH
		if h.Counts != nil {
			n.w = max(n.w, textW(countText(h.Counts[n.name]))+2*nodePadX)
			n.h += countH
		}
		if len(n.loops) > 0 {
			n.loopW = loopReach + labelPad + labelsW(n.loops)
		}
	}
	for _, a := range arrows {
		a.labelW = labelsW(a.labels)
	}

	rank(g, nodes, states, arrows)
	lay := &layout{layers: build(states, nodes, arrows)}
	order(lay.layers)
	place(lay.layers)
	lay.heights(lineH)
	for _, layer := range lay.layers {
		for _, e := range layer {
			e.x += margin
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="jetsaga-diagram" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" role="img">`+"\n",
		lay.width, lay.height, lay.width, lay.height)
	fmt.Fprintf(&b, "<title>%s</title>\n", esc(title))
	b.WriteString(`<defs>` +
		`<marker id="jsd-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerUnits="userSpaceOnUse" markerWidth="9" markerHeight="9" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#52607a"/></marker>` +
		`<marker id="jsd-arrow-taken" viewBox="0 0 10 10" refX="10" refY="5" markerUnits="userSpaceOnUse" markerWidth="9" markerHeight="9" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#d62828"/></marker>` +
		"</defs>\n")
	b.WriteString("<style>" +
		".jetsaga-diagram{max-width:100%;height:auto}" +
		".jetsaga-diagram text{font:13px system-ui,sans-serif;fill:#1d2330}" +
		".jetsaga-diagram .state rect{fill:#fff;stroke:#52607a;stroke-width:1.5}" +
		".jetsaga-diagram .state.initial rect{fill:#e9eef6}" +
		".jetsaga-diagram .state.final rect{stroke-width:3}" +
		".jetsaga-diagram .state.current rect{fill:#ffe08a;stroke:#c98a00;stroke-width:3}" +
		".jetsaga-diagram .count{font-size:11px;fill:#52607a}" +
		".jetsaga-diagram .edge path{fill:none;stroke:#52607a;stroke-width:1.3}" +
		".jetsaga-diagram .edge.taken path{stroke:#d62828;stroke-width:2.6}" +
		".jetsaga-diagram .edge text{font-size:11px;paint-order:stroke;stroke:#fff;stroke-width:3px}" +
		".jetsaga-diagram .edge text.taken{fill:#d62828;font-weight:700}" +
		"</style>\n")

	// Arrows first, the states over them.
	box := func(e *elem) (x, y float64) {
		return e.x - e.node.w/2, lay.bandY[e.layer] + (lay.bandH[e.layer]-e.node.h)/2
	}
	ports := portsOf(lay.layers)
	for _, a := range arrows {
		var d strings.Builder
		top, bottom := a.top, a.bottom
		_, ty := box(top)
		_, by := box(bottom)
		x, y := ports[[2]*elem{top, a.first()}], ty+top.node.h
		fmt.Fprintf(&d, "M%.1f,%.1f", x, y)
		bandEnd := lay.bandY[top.layer] + lay.bandH[top.layer]
		if bandEnd > y {
			fmt.Fprintf(&d, " V%.1f", bandEnd)
		}
		y = bandEnd
		curve := func(x2, y2 float64) {
			m := (y + y2) / 2
			fmt.Fprintf(&d, " C%.1f,%.1f %.1f,%.1f %.1f,%.1f", x, m, x2, m, x2, y2)
		}
		for _, e := range a.elems {
			curve(e.x, lay.bandY[e.layer])
			x, y = e.x, lay.bandY[e.layer]+lay.bandH[e.layer]
			fmt.Fprintf(&d, " V%.1f", y)
		}
		px := ports[[2]*elem{bottom, a.last()}]
		curve(px, lay.bandY[bottom.layer])
		if by > lay.bandY[bottom.layer] {
			fmt.Fprintf(&d, " V%.1f", by)
		}
		end := "marker-end"
		if a.up {
			end = "marker-start"
		}
		fmt.Fprintf(&b, `<g class="%s" data-from="%s" data-to="%s"><path d="%s" %s="url(#%s)"/>`,
			edgeClass(a.taken), esc(a.from), esc(a.to), d.String(), end, marker(a.taken))
		for _, e := range a.elems {
			if e.kind == kLabel {
				writeLabels(&b, e.x+labelPad, lay.bandY[e.layer]+lay.bandH[e.layer]/2, a.labels)
			}
		}
		b.WriteString("</g>\n")
	}
	for _, layer := range lay.layers {
		for _, e := range layer {
			if e.kind != kNode {
				continue
			}
			n := e.node
			x, y := box(e)
			cls := "state"
			switch n.name {
			case g.Initial:
				cls += " initial"
			case g.Final:
				cls += " final"
			}
			if n.name == h.Current {
				cls += " current"
			}
			fmt.Fprintf(&b, `<g class="%s" data-state="%s"`, cls, esc(n.name))
			if h.Counts != nil {
				fmt.Fprintf(&b, ` data-count="%d"`, h.Counts[n.name])
			}
			fmt.Fprintf(&b, `><rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="8"/>`, x, y, n.w, n.h)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, e.x, y+23, esc(n.name))
			if h.Counts != nil {
				fmt.Fprintf(&b, `<text class="count" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, e.x, y+39, countText(h.Counts[n.name]))
			}
			b.WriteString("</g>\n")
			if len(n.loops) > 0 {
				// A loop out of the box's right side and back, its labels
				// beside it.
				loopTaken := slices.ContainsFunc(n.loops, func(l label) bool { return l.taken })
				r, cy := x+n.w, y+n.h/2
				c := float64(loopReach) * 4 / 3 // a cubic reaches 3/4 of its control points
				fmt.Fprintf(&b, `<g class="%s" data-from="%s" data-to="%s"><path d="M%.1f,%.1f C%.1f,%.1f %.1f,%.1f %.1f,%.1f" marker-end="url(#%s)"/>`,
					edgeClass(loopTaken), esc(n.name), esc(n.name), r, cy-9, r+c, cy-26, r+c, cy+26, r, cy+9, marker(loopTaken))
				writeLabels(&b, r+loopReach+labelPad, cy, n.loops)
				b.WriteString("</g>\n")
			}
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// first and last are the arrow's elements next to its upper and lower
// states.
func (a *arrow) first() *elem { return a.elems[0] }
func (a *arrow) last() *elem  { return a.elems[len(a.elems)-1] }

// portsOf spreads the arrows leaving a state's box at the bottom, and
// those entering it at the top, along that side in the order of the
// elements they lead to: ports[{state, element}] is the x.
func portsOf(layers [][]*elem) map[[2]*elem]float64 {
	ports := map[[2]*elem]float64{}
	for _, layer := range layers {
		for _, e := range layer {
			if e.kind != kNode {
				continue
			}
			for _, ns := range [2][]*elem{e.up, e.down} {
				ns = slices.Clone(ns)
				slices.SortFunc(ns, func(a, b *elem) int { return a.pos - b.pos })
				step := 0.0
				if len(ns) > 1 {
					step = min(portStep, (e.node.w-2*portInset)/float64(len(ns)-1))
				}
				for i, n := range ns {
					ports[[2]*elem{e, n}] = e.x + (float64(i)-float64(len(ns)-1)/2)*step
				}
			}
		}
	}
	return ports
}

// writeLabels writes ls, one a line, from x, the block's vertical centre
// at y.
func writeLabels(b *strings.Builder, x, y float64, ls []label) {
	y += 11 - float64(len(ls))*lineH/2 // the first line's baseline
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f">`, x, y)
	for i, l := range ls {
		dy := 0
		if i > 0 {
			dy = lineH
		}
		cls := ""
		if l.taken {
			cls = ` class="taken"`
		}
		fmt.Fprintf(b, `<tspan x="%.1f" dy="%d"%s>%s</tspan>`, x, dy, cls, esc(l.text))
	}
	b.WriteString("</text>")
}

func edgeClass(taken bool) string {
	if taken {
		return "edge taken"
	}
	return "edge"
}

func marker(taken bool) string {
	if taken {
		return "jsd-arrow-taken"
	}
	return "jsd-arrow"
}

func countText(n int) string {
	if n == 1 {
		return "1 instance"
	}
	return fmt.Sprintf("%d instances", n)
}

// esc escapes s for XML text and attribute values; a byte that XML does
// not allow (a control character, invalid UTF-8) becomes U+FFFD.
func esc(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '<':
			b.WriteString("&lt;")
		case r == '>':
			b.WriteString("&gt;")
		case r == '&':
			b.WriteString("&amp;")
		case r == '"':
			b.WriteString("&#34;")
		case r == '\'':
			b.WriteString("&#39;")
		case r == utf8.RuneError, r < 0x20 && r != '\t', r == 0xFFFE, r == 0xFFFF:
			b.WriteRune('\uFFFD')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
