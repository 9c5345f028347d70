package diagram

import (
	"cmp"
	"math"
	"slices"
)

// The layout is layered, top to bottom, in the manner of Graphviz dot
// (Sugiyama's method): each state gets a rank (cycles broken where a
// depth-first walk from Initial meets a state on its path, and at
// Initial; then the longest path from the top; the final state below
// every other), and ranks are the even layers. An arrow spanning layers gets an element in
// each layer between its ends: its label in one odd layer, a thin
// "dummy" in the others. Within a layer, elements never overlap (each
// has a footprint: a state's box with its loops, a label beside its
// line), so an arrow that runs straight down through its elements and
// bends only in the empty gaps between layers crosses no box and no
// label. The order within layers is chosen to reduce crossings
// (barycentre sweeps with adjacent swaps, the best order kept), and the
// x positions to straighten arrows (each layer placed as close as its
// separation allows to the weighted mean of its neighbours, solved
// exactly by pooling adjacent violators).

// Layout constants, in pixels.
const (
	layerGap  = 28 // vertical gap between two layers
	nodeSep   = 28 // horizontal gap beside a state
	edgeSep   = 12 // horizontal gap between two arrows' elements
	labelPad  = 6  // from an arrow's line to its label
	loopReach = 26 // how far a loop reaches right of its state
	minLayerH = 6  // the height of a layer of dummies only
	sweeps    = 24 // crossing-reduction sweeps
	placings  = 12 // x-placement rounds
)

type elemKind int

const (
	kNode elemKind = iota
	kDummy
	kLabel
)

// elem is one element of a layer.
type elem struct {
	kind  elemKind
	node  *node  // kNode
	arrow *arrow // kDummy, kLabel
	layer int
	pos   int     // index in its layer
	bary  float64 // mean position of its neighbours, while ordering
	x     float64 // a state's centre; an arrow's line
	// left and right: the footprint's reach either side of x.
	left, right float64
	up, down    []*elem // neighbours in the layers above and below
}

// weight is how much the segment between a and b wants to be straight:
// most between two elements of one arrow, as dot weighs them.
func weight(a, b *elem) float64 {
	switch {
	case a.kind != kNode && b.kind != kNode:
		return 8
	case a.kind != kNode || b.kind != kNode:
		return 2
	}
	return 1
}

func (e *elem) sep(next *elem) float64 {
	if e.kind == kNode || next.kind == kNode {
		return nodeSep
	}
	return edgeSep
}

type layout struct {
	layers [][]*elem
	bandY  []float64 // top of each layer
	bandH  []float64
	width  float64
	height float64
}

// rank assigns each node a rank and each arrow its direction in the
// layout (down: from its source's rank to its target's).
func rank(g Graph, nodes map[string]*node, states []string, arrows []*arrow) {
	out := map[string][]*arrow{}
	for _, a := range arrows {
		out[a.from] = append(out[a.from], a)
	}
	// Depth-first from Initial, then from each state not reached in the
	// graph's order: an arrow to a state on the walk's path goes up.
	const (
		unseen = iota
		onPath
		done
	)
	mark := map[string]int{}
	var walk func(s string)
	walk = func(s string) {
		mark[s] = onPath
		for _, a := range out[s] {
			switch mark[a.to] {
			case onPath:
				a.up = true
			case unseen:
				walk(a.to)
			}
		}
		mark[s] = done
	}
	if nodes[g.Initial] != nil {
		walk(g.Initial)
	}
	for _, s := range states {
		if mark[s] == unseen {
			walk(s)
		}
	}
	// Initial at the top: an arrow to it goes up, whatever the walk met.
	for _, a := range arrows {
		if a.to == g.Initial {
			a.up = true
		}
	}
	// Longest path from the top, in topological order.
	in := map[string]int{}
	below := map[string][]string{}
	for _, a := range arrows {
		top, bottom := a.ends()
		in[bottom]++
		below[top] = append(below[top], bottom)
	}
	var queue []string
	for _, s := range states {
		if in[s] == 0 {
			queue = append(queue, s)
		}
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for _, t := range below[s] {
			nodes[t].rank = max(nodes[t].rank, nodes[s].rank+1)
			if in[t]--; in[t] == 0 {
				queue = append(queue, t)
			}
		}
	}
	// A state no arrow enters (but Initial) sits just above the highest
	// state it leads to, not at the top.
	for _, s := range states {
		if n := nodes[s]; s != g.Initial && len(below[s]) > 0 && !slices.ContainsFunc(arrows, func(a *arrow) bool { _, b := a.ends(); return b == s }) {
			r := math.MaxInt
			for _, t := range below[s] {
				r = min(r, nodes[t].rank-1)
			}
			n.rank = max(n.rank, r)
		}
	}
	// The final state below every other.
	if f := nodes[g.Final]; f != nil && g.Final != g.Initial {
		last := -1
		for _, s := range states {
			if s != g.Final {
				last = max(last, nodes[s].rank)
			}
		}
		f.rank = max(f.rank, last+1)
	}
	// Every arrow runs down from its upper state, up if that is its target.
	for _, a := range arrows {
		a.up = nodes[a.from].rank > nodes[a.to].rank
	}
}

// ends returns the arrow's upper and lower states in the layout.
func (a *arrow) ends() (top, bottom string) {
	if a.up {
		return a.to, a.from
	}
	return a.from, a.to
}

// build makes the layers: a state in layer 2×rank, and for each arrow an
// element in every layer between its ends, its label in the odd one
// with the least label width yet (nearest its source on a tie).
func build(states []string, nodes map[string]*node, arrows []*arrow) [][]*elem {
	last := 0
	for _, s := range states {
		last = max(last, 2*nodes[s].rank)
	}
	layers := make([][]*elem, last+1)
	elemOf := map[string]*elem{}
	for _, s := range states {
		n := nodes[s]
		e := &elem{kind: kNode, node: n, layer: 2 * n.rank, left: n.w / 2, right: n.w/2 + n.loopW}
		elemOf[s] = e
		layers[e.layer] = append(layers[e.layer], e)
	}
	labelW := make([]float64, len(layers))
	for _, a := range arrows {
		topName, bottomName := a.ends()
		top, bottom := elemOf[topName], elemOf[bottomName]
		at := -1
		if a.labelW > 0 {
			for l := top.layer + 1; l < bottom.layer; l += 2 {
				better := at < 0 || labelW[l] < labelW[at]
				if a.up && at >= 0 && labelW[l] == labelW[at] {
					better = true // nearer the source, at the bottom
				}
				if better {
					at = l
				}
			}
			labelW[at] += a.labelW
		}
		prev := top
		for l := top.layer + 1; l < bottom.layer; l++ {
			e := &elem{kind: kDummy, arrow: a, layer: l, left: 1, right: 1}
			if l == at {
				e.kind, e.right = kLabel, labelPad+a.labelW
			}
			a.elems = append(a.elems, e)
			layers[l] = append(layers[l], e)
			prev.down = append(prev.down, e)
			e.up = append(e.up, prev)
			prev = e
		}
		prev.down = append(prev.down, bottom)
		bottom.up = append(bottom.up, prev)
		a.top, a.bottom = top, bottom
	}
	for _, layer := range layers {
		for i, e := range layer {
			e.pos = i
		}
	}
	return layers
}

// order reduces crossings: barycentre sweeps down and up, each followed
// by swaps of neighbours that remove crossings; the best order is kept.
func order(layers [][]*elem) {
	best := crossings(layers)
	saved := snapshot(layers)
	for i := 0; i < sweeps && best > 0; i++ {
		down := i%2 == 0
		for k := range layers {
			l := k
			if !down {
				l = len(layers) - 1 - k
			}
			layer := layers[l]
			for _, e := range layer {
				ns := e.up
				if !down {
					ns = e.down
				}
				if len(ns) == 0 {
					e.bary = float64(e.pos)
					continue
				}
				sum := 0.0
				for _, n := range ns {
					sum += float64(n.pos)
				}
				e.bary = sum / float64(len(ns))
			}
			slices.SortStableFunc(layer, func(a, b *elem) int {
				return cmp.Compare(a.bary, b.bary)
			})
			for p, e := range layer {
				e.pos = p
			}
		}
		transpose(layers)
		if c := crossings(layers); c < best {
			best, saved = c, snapshot(layers)
		}
	}
	for l, layer := range saved {
		layers[l] = layer
		for p, e := range layer {
			e.pos = p
		}
	}
}

func snapshot(layers [][]*elem) [][]*elem {
	s := make([][]*elem, len(layers))
	for l := range layers {
		s[l] = slices.Clone(layers[l])
	}
	return s
}

// transpose swaps neighbours in a layer while that removes crossings.
func transpose(layers [][]*elem) {
	for improved, rounds := true, 0; improved && rounds < 8; rounds++ {
		improved = false
		for l, layer := range layers {
			for i := 0; i+1 < len(layer); i++ {
				a, b := layer[i], layer[i+1]
				if pairCrossings(a, b) > pairCrossings(b, a) {
					layer[i], layer[i+1] = b, a
					a.pos, b.pos = i+1, i
					improved = true
				}
			}
			layers[l] = layer
		}
	}
}

// pairCrossings counts the crossings between a's and b's segments (up
// and down) if a stands left of b.
func pairCrossings(a, b *elem) int {
	n := 0
	for _, ns := range [2][2][]*elem{{a.up, b.up}, {a.down, b.down}} {
		for _, x := range ns[0] {
			for _, y := range ns[1] {
				if x.pos > y.pos {
					n++
				}
			}
		}
	}
	return n
}

// crossings counts the segments that cross between adjacent layers.
func crossings(layers [][]*elem) int {
	n := 0
	for _, layer := range layers {
		var segs [][2]int
		for _, e := range layer {
			for _, d := range e.down {
				segs = append(segs, [2]int{e.pos, d.pos})
			}
		}
		for i, s := range segs {
			for _, t := range segs[i+1:] {
				if (s[0]-t[0])*(s[1]-t[1]) < 0 {
					n++
				}
			}
		}
	}
	return n
}

// place sets each element's x: layers packed left first, then rounds
// that move each layer towards its neighbours (above, then below, then
// both), keeping the separation.
func place(layers [][]*elem) {
	for _, layer := range layers {
		x := 0.0
		for i, e := range layer {
			if i > 0 {
				x += layer[i-1].right + layer[i-1].sep(e)
			}
			x += e.left
			e.x = x
		}
	}
	for r := range placings {
		for k := range layers {
			switch r % 3 {
			case 0:
				fit(layers[k], func(e *elem) []*elem { return e.up })
			case 1:
				l := len(layers) - 1 - k
				fit(layers[l], func(e *elem) []*elem { return e.down })
			default:
				fit(layers[k], func(e *elem) []*elem { return append(slices.Clone(e.up), e.down...) })
			}
		}
	}
	straighten(layers)
	// Shift everything right of 0.
	minX := math.Inf(1)
	for _, layer := range layers {
		for _, e := range layer {
			minX = min(minX, e.x-e.left)
		}
	}
	for _, layer := range layers {
		for _, e := range layer {
			e.x -= minX
		}
	}
}

// fit moves a layer's elements as close as their order and separation
// allow to the weighted mean of their neighbours' x (least squares,
// solved exactly by pooling adjacent violators); an element without
// neighbours holds its place, lightly.
func fit(layer []*elem, neighbours func(*elem) []*elem) {
	if len(layer) == 0 {
		return
	}
	type block struct {
		w, wt, mean float64
		n           int
	}
	var blocks []block
	offset := 0.0 // the least distance from the first element
	for i, e := range layer {
		if i > 0 {
			p := layer[i-1]
			offset += p.right + p.sep(e) + e.left
		}
		want, w := e.x, 0.01
		if ns := neighbours(e); len(ns) > 0 {
			sum, ws := 0.0, 0.0
			for _, n := range ns {
				wn := weight(e, n)
				sum += wn * n.x
				ws += wn
			}
			want, w = sum/ws, ws
		}
		b := block{w: w, wt: w * (want - offset), n: 1}
		b.mean = b.wt / b.w
		for len(blocks) > 0 && blocks[len(blocks)-1].mean > b.mean {
			p := blocks[len(blocks)-1]
			blocks = blocks[:len(blocks)-1]
			b = block{w: p.w + b.w, wt: p.wt + b.wt, n: p.n + b.n}
			b.mean = b.wt / b.w
		}
		blocks = append(blocks, b)
	}
	i, offset := 0, 0.0
	for _, b := range blocks {
		for range b.n {
			e := layer[i]
			if i > 0 {
				p := layer[i-1]
				offset += p.right + p.sep(e) + e.left
			}
			e.x = b.mean + offset
			i++
		}
	}
}

// straighten lines up the elements of each arrow that spans several
// layers on one x, where their layers have room for it: of the x they
// have, the one that moves them least.
func straighten(layers [][]*elem) {
	fits := func(e *elem, x float64) bool {
		layer := layers[e.layer]
		if p := e.pos - 1; p >= 0 && layer[p].x+layer[p].right+layer[p].sep(e) > x-e.left+0.01 {
			return false
		}
		if n := e.pos + 1; n < len(layer) && x+e.right+e.sep(layer[n]) > layer[n].x-layer[n].left+0.01 {
			return false
		}
		return true
	}
	var chains [][]*elem
	seen := map[*arrow]bool{}
	for _, layer := range layers {
		for _, e := range layer {
			if e.arrow != nil && !seen[e.arrow] && len(e.arrow.elems) > 1 {
				seen[e.arrow] = true
				chains = append(chains, e.arrow.elems)
			}
		}
	}
	for range 4 {
		for _, chain := range chains {
			best, cost := math.NaN(), math.Inf(1)
			for _, c := range chain {
				x, moved := c.x, 0.0
				for _, e := range chain {
					moved += math.Abs(e.x - x)
				}
				if moved < cost && !slices.ContainsFunc(chain, func(e *elem) bool { return !fits(e, x) }) {
					best, cost = x, moved
				}
			}
			if !math.IsNaN(best) {
				for _, e := range chain {
					e.x = best
				}
				continue
			}
			// Not all on one x: each where its neighbour in the chain
			// is, where there is room, down and then up.
			for i := 1; i < len(chain); i++ {
				if fits(chain[i], chain[i-1].x) {
					chain[i].x = chain[i-1].x
				}
			}
			for i := len(chain) - 2; i >= 0; i-- {
				if fits(chain[i], chain[i+1].x) {
					chain[i].x = chain[i+1].x
				}
			}
		}
	}
}

// heights sets each layer's band: a layer of states as high as its
// highest state or loop labels, one of arrows as its highest label.
func (lay *layout) heights(lineH float64) {
	y := float64(margin)
	for l, layer := range lay.layers {
		h := 0.0
		if l%2 == 1 {
			h = minLayerH
		}
		for _, e := range layer {
			switch e.kind {
			case kNode:
				h = max(h, e.node.h, float64(len(e.node.loops))*lineH+4)
			case kLabel:
				h = max(h, float64(len(e.arrow.labels))*lineH+4)
			}
		}
		lay.bandY = append(lay.bandY, y)
		lay.bandH = append(lay.bandH, h)
		y += h + layerGap
	}
	lay.height = y - layerGap + float64(margin)
	for _, layer := range lay.layers {
		for _, e := range layer {
			lay.width = max(lay.width, e.x+e.right)
		}
	}
	lay.width += 2 * float64(margin)
}
