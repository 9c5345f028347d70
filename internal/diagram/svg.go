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

// Layout constants, in pixels.
const (
	charW     = 7.2 // average advance of the 13 px sans-serif text
	nodeH     = 36
	countH    = 16 // added to a node with a count line
	nodePadX  = 14
	nodeGapY  = 28
	minGapX   = 70
	loopLineH = 14
	laneLineH = 14
	margin    = 24
)

type node struct {
	name       string
	rank       int
	x, y, w, h float64
	loops      []label // self transitions
}

type label struct {
	text  string
	taken bool
}

type arrow struct {
	from, to string
	labels   []label
	taken    bool
}

func textW(s string) float64 { return float64(utf8.RuneCountInString(s)) * charW }

// SVG returns g drawn as an SVG document (an <svg> element, with its
// namespace, ready to inline in HTML or save as a .svg file), titled
// title.
func SVG(title string, g Graph, h Highlight) string {
	nodes, order := layoutNodes(g)
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

	// Columns: widths, and the gap after each (room for the labels of
	// the straight arrows that cross it).
	ranks := 0
	for _, n := range nodes {
		ranks = max(ranks, n.rank+1)
	}
	colW := make([]float64, ranks)
	gap := make([]float64, ranks)
	for i := range gap {
		gap[i] = minGapX
	}
	for _, n := range nodes {
		n.w = textW(n.name) + 2*nodePadX
		if h.Counts != nil {
			n.w = max(n.w, textW(countText(h.Counts[n.name]))+2*nodePadX)
		}
		for _, l := range n.loops {
			n.w = max(n.w, textW(l.text)+8)
		}
		n.h = nodeH
		if h.Counts != nil {
			n.h += countH
		}
		colW[n.rank] = max(colW[n.rank], n.w)
	}
	var lanes []*arrow
	for _, a := range arrows {
		f, t := nodes[a.from], nodes[a.to]
		if t.rank == f.rank+1 {
			for _, l := range a.labels {
				gap[f.rank] = max(gap[f.rank], textW(l.text)+30)
			}
			continue
		}
		lanes = append(lanes, a)
	}
	// The vertical runs of lane arrows sit in the gaps: widen for them.
	laneRoom := float64(4 * min(len(lanes), 12))
	x := float64(margin) + laneRoom
	colX := make([]float64, ranks)
	for r := range ranks {
		colX[r] = x
		x += colW[r] + gap[r] + laneRoom
	}
	width := x - gap[ranks-1] + float64(margin)

	// Rows: a grid, so that the n-th state of every column is on one
	// line and arrows between them are level; a row is as high as its
	// highest state, plus the labels of its loops above it.
	row := map[string]int{}
	inCol := make([]int, ranks)
	var rowLoop, rowH []float64
	for _, name := range order {
		n := nodes[name]
		r := inCol[n.rank]
		inCol[n.rank]++
		row[name] = r
		if r == len(rowH) {
			rowLoop, rowH = append(rowLoop, 0), append(rowH, 0)
		}
		if len(n.loops) > 0 {
			rowLoop[r] = max(rowLoop[r], 22+float64(len(n.loops))*loopLineH)
		}
		rowH[r] = max(rowH[r], n.h)
	}
	top := float64(margin) + 10
	rowY := make([]float64, len(rowH))
	y := top
	for r := range rowH {
		rowY[r] = y + rowLoop[r]
		y = rowY[r] + rowH[r] + nodeGapY
	}
	for name, n := range nodes {
		n.x = colX[n.rank] + (colW[n.rank]-n.w)/2
		n.y = rowY[row[name]] + (rowH[row[name]]-n.h)/2
	}
	bottom := y

	var b strings.Builder
	laneY := bottom
	for _, a := range lanes {
		laneY += 8 + float64(len(a.labels))*laneLineH
	}
	height := laneY + float64(margin)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="jetsaga-diagram" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" role="img">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, "<title>%s</title>\n", esc(title))
	b.WriteString(`<defs>` +
		`<marker id="jsd-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerUnits="userSpaceOnUse" markerWidth="9" markerHeight="9" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#52607a"/></marker>` +
		`<marker id="jsd-arrow-taken" viewBox="0 0 10 10" refX="10" refY="5" markerUnits="userSpaceOnUse" markerWidth="9" markerHeight="9" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#d62828"/></marker>` +
		"</defs>\n")
	b.WriteString("<style>" +
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

	// Straight arrows and lanes first, the states over them.
	straight := 0
	laneY = bottom
	for _, a := range arrows {
		f, t := nodes[a.from], nodes[a.to]
		cls := edgeClass(a.taken)
		if t.rank == f.rank+1 {
			x1, y1 := f.x+f.w, f.y+f.h/2
			x2, y2 := t.x, t.y+t.h/2
			fmt.Fprintf(&b, `<g class="%s" data-from="%s" data-to="%s"><path d="M%.1f,%.1f L%.1f,%.1f" marker-end="url(#%s)"/>`,
				cls, esc(a.from), esc(a.to), x1, y1, x2, y2, marker(a.taken))
			// Labels along the arrow, at a fraction that differs from
			// one arrow to the next so that crossing ones part.
			frac := 0.5 + 0.15*float64(straight%3-1)
			straight++
			lx, ly := x1+(x2-x1)*frac, y1+(y2-y1)*frac-4-float64(len(a.labels)-1)*laneLineH
			writeLabels(&b, lx, ly, a.labels)
			b.WriteString("</g>\n")
			continue
		}
		// A lane of its own below the states: out of the source's right
		// side, down its gap, across, up the gap before the target, into
		// its left side.
		i := slices.Index(lanes, a)
		laneY += 8 + float64(len(a.labels))*laneLineH
		off := float64(4 * (i%12 + 1))
		gx1 := colX[f.rank] + colW[f.rank] + off
		gx2 := colX[t.rank] - off
		y1, y2 := f.y+f.h/2, t.y+t.h/2
		fmt.Fprintf(&b, `<g class="%s" data-from="%s" data-to="%s"><path d="M%.1f,%.1f H%.1f V%.1f H%.1f V%.1f H%.1f" marker-end="url(#%s)"/>`,
			cls, esc(a.from), esc(a.to), f.x+f.w, y1, gx1, laneY, gx2, y2, t.x, marker(a.taken))
		writeLabels(&b, (gx1+gx2)/2, laneY-4-float64(len(a.labels)-1)*laneLineH, a.labels)
		b.WriteString("</g>\n")
	}
	for _, name := range order {
		n := nodes[name]
		cls := "state"
		switch name {
		case g.Initial:
			cls += " initial"
		case g.Final:
			cls += " final"
		}
		if name == h.Current {
			cls += " current"
		}
		fmt.Fprintf(&b, `<g class="%s" data-state="%s"`, cls, esc(name))
		if h.Counts != nil {
			fmt.Fprintf(&b, ` data-count="%d"`, h.Counts[name])
		}
		fmt.Fprintf(&b, `><rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="8"/>`, n.x, n.y, n.w, n.h)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, n.x+n.w/2, n.y+23, esc(name))
		if h.Counts != nil {
			fmt.Fprintf(&b, `<text class="count" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, n.x+n.w/2, n.y+39, countText(h.Counts[name]))
		}
		b.WriteString("</g>\n")
		if len(n.loops) > 0 {
			loopTaken := slices.ContainsFunc(n.loops, func(l label) bool { return l.taken })
			cx := n.x + n.w/2
			fmt.Fprintf(&b, `<g class="%s" data-from="%s" data-to="%s"><path d="M%.1f,%.1f C%.1f,%.1f %.1f,%.1f %.1f,%.1f" marker-end="url(#%s)"/>`,
				edgeClass(loopTaken), esc(name), esc(name), cx-14, n.y, cx-34, n.y-24, cx+34, n.y-24, cx+14, n.y, marker(loopTaken))
			writeLabels(&b, cx, n.y-22-float64(len(n.loops)-1)*loopLineH, n.loops)
			b.WriteString("</g>\n")
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// layoutNodes places every state in a column (rank) and returns them
// with the drawing order: by column, then by the graph's order.
func layoutNodes(g Graph) (map[string]*node, []string) {
	nodes := map[string]*node{}
	var states []string
	for _, s := range g.States {
		if nodes[s] == nil {
			nodes[s] = &node{name: s, rank: -1}
			states = append(states, s)
		}
	}
	if nodes[g.Initial] == nil {
		return nodes, states
	}
	next := map[string][]string{}
	for _, t := range g.Transitions {
		if t.From != t.To && nodes[t.From] != nil && nodes[t.To] != nil {
			next[t.From] = append(next[t.From], t.To)
		}
	}
	final := nodes[g.Final]
	if g.Final == g.Initial {
		final = nil
	}
	nodes[g.Initial].rank = 0
	queue := []string{g.Initial}
	last := 0
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for _, t := range next[s] {
			if n := nodes[t]; n.rank < 0 && n != final {
				n.rank = nodes[s].rank + 1
				last = max(last, n.rank)
				queue = append(queue, t)
			}
		}
	}
	if final != nil {
		last++
		final.rank = last
	}
	for _, s := range states {
		if nodes[s].rank < 0 {
			last++
			nodes[s].rank = last
		}
	}
	order := slices.Clone(states)
	slices.SortStableFunc(order, func(a, b string) int { return nodes[a].rank - nodes[b].rank })
	return nodes, order
}

func writeLabels(b *strings.Builder, x, y float64, ls []label) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">`, x, y)
	for i, l := range ls {
		dy := 0
		if i > 0 {
			dy = laneLineH
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
