package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// charts holds what the SVG charts (-svg) draw: the lateness bench's
// distributions and the million bench's drain.
type charts struct {
	lateness *latenessChart
	burst    []*millionReport // jetsaga, raw
}

type latenessChart struct {
	n             int
	spread        time.Duration
	jet, raw      []time.Duration // received - due
	jetEnq, rawEq []time.Duration // enqueued - due
}

func (c *charts) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if c.lateness != nil {
		if err := os.WriteFile(filepath.Join(dir, "lateness.svg"), []byte(c.lateness.svg()), 0o644); err != nil {
			return err
		}
	}
	if len(c.burst) == 2 {
		if err := os.WriteFile(filepath.Join(dir, "burst.svg"), []byte(burstSVG(c.burst[0], c.burst[1])), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// series is one line of a chart.
type series struct {
	name  string
	color string
	dash  bool
	pts   [][2]float64
}

// plot draws series into the rectangle (x0,y0)-(x0+w,y0+h) with axes
// from (0 or minX, 0) to (maxX, maxY), ticks and labels.
type plot struct {
	x0, y0, w, h           float64
	minX, maxX, maxY       float64
	title, xLabel, yLabel  string
	xFmt, yFmt             func(float64) string
	series                 []series
	vlines                 []vline
	legendX, legendYOffset float64
}

type vline struct {
	x     float64
	label string
	color string
}

func (p *plot) sx(x float64) float64 { return p.x0 + (x-p.minX)/(p.maxX-p.minX)*p.w }
func (p *plot) sy(y float64) float64 { return p.y0 + p.h - y/p.maxY*p.h }

func (p *plot) draw(b *strings.Builder) {
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" font-size="14" font-weight="bold">%s</text>`+"\n", p.x0, p.y0-10, esc(p.title))
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#999"/>`+"\n", p.x0, p.y0, p.w, p.h)
	for i := 0; i <= 5; i++ {
		x := p.minX + (p.maxX-p.minX)*float64(i)/5
		y := p.maxY * float64(i) / 5
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", p.sx(x), p.y0, p.sx(x), p.y0+p.h)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="middle">%s</text>`+"\n", p.sx(x), p.y0+p.h+14, esc(p.xFmt(x)))
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", p.x0, p.sy(y), p.x0+p.w, p.sy(y))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="end">%s</text>`+"\n", p.x0-4, p.sy(y)+4, esc(p.yFmt(y)))
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="12" text-anchor="middle">%s</text>`+"\n", p.x0+p.w/2, p.y0+p.h+32, esc(p.xLabel))
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="12" text-anchor="middle" transform="rotate(-90 %.1f %.1f)">%s</text>`+"\n",
		p.x0-48, p.y0+p.h/2, p.x0-48, p.y0+p.h/2, esc(p.yLabel))
	for _, v := range p.vlines {
		if v.x < p.minX || v.x > p.maxX {
			continue
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="2,3"/>`+"\n", p.sx(v.x), p.y0, p.sx(v.x), p.y0+p.h, v.color)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10" fill="%s">%s</text>`+"\n", p.sx(v.x)+3, p.y0+12, v.color, esc(v.label))
	}
	for i, s := range p.series {
		if len(s.pts) == 0 {
			continue
		}
		var path strings.Builder
		for j, pt := range s.pts {
			cmd := "L"
			if j == 0 {
				cmd = "M"
			}
			x, y := min(max(pt[0], p.minX), p.maxX), min(pt[1], p.maxY)
			fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, p.sx(x), p.sy(y))
		}
		dash := ""
		if s.dash {
			dash = ` stroke-dasharray="6,3"`
		}
		fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.6"%s/>`+"\n", strings.TrimSpace(path.String()), s.color, dash)
		ly := p.y0 + p.legendYOffset + 16*float64(i)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", p.legendX, ly, p.legendX+22, ly, s.color, dash)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="11">%s</text>`+"\n", p.legendX+28, ly+4, esc(s.name))
	}
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func svgDoc(w, h int, body string) string {
	return fmt.Sprintf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">`+"\n"+
		`<rect width="100%%" height="100%%" fill="white"/>`+"\n%s</svg>\n", w, h, w, h, body)
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// histogram returns the share (percent) of ds in each bin of width bin
// from lo to hi, as points at the bins' left edges (a step line).
func histogram(ds []time.Duration, lo, hi, bin float64) [][2]float64 {
	nb := int(math.Ceil((hi - lo) / bin))
	counts := make([]int, nb)
	for _, d := range ds {
		ms := float64(d) / float64(time.Millisecond)
		i := int(math.Floor((ms - lo) / bin))
		if i >= 0 && i < nb {
			counts[i]++
		}
	}
	var pts [][2]float64
	for i, c := range counts {
		y := 100 * float64(c) / float64(max(1, len(ds)))
		pts = append(pts, [2]float64{lo + float64(i)*bin, y}, [2]float64{lo + float64(i+1)*bin, y})
	}
	return pts
}

func (c *latenessChart) svg() string {
	all := slices.Concat(c.jet, c.raw)
	if len(all) == 0 {
		return svgDoc(300, 60, `<text x="10" y="30">no data</text>`)
	}
	lo := math.Min(0, float64(slices.Min(all))/float64(time.Millisecond))
	hiD := max(percentile(sortedCopy(c.jet), 99.9), percentile(sortedCopy(c.raw), 99.9))
	hi := niceCeil(float64(hiD)/float64(time.Millisecond) + 1)
	bin := max(1, math.Round(hi/60))
	jh, rh := histogram(c.jet, lo, hi, bin), histogram(c.raw, lo, hi, bin)
	maxY := 0.0
	for _, p := range slices.Concat(jh, rh) {
		maxY = max(maxY, p[1])
	}
	jp99 := float64(percentile(sortedCopy(c.jet), 99)) / float64(time.Millisecond)
	rp99 := float64(percentile(sortedCopy(c.raw), 99)) / float64(time.Millisecond)
	p := &plot{
		x0: 80, y0: 40, w: 640, h: 300, minX: lo, maxX: hi, maxY: niceCeil(maxY),
		title:  fmt.Sprintf("Lateness (received - due) of %d timeouts spread over %v", c.n, c.spread),
		xLabel: fmt.Sprintf("lateness, ms (bins of %g ms; beyond p99.9 not drawn)", bin), yLabel: "% of timeouts",
		xFmt: func(x float64) string { return fmt.Sprintf("%g", math.Round(x)) },
		yFmt: func(y float64) string { return fmt.Sprintf("%.3g", y) },
		series: []series{
			{name: "jetsaga Receive", color: "#d62728", pts: jh},
			{name: "raw nats.go consumer", color: "#1f77b4", pts: rh},
		},
		vlines: []vline{
			{x: jp99, label: "jetsaga p99 " + fmtDur(time.Duration(jp99*float64(time.Millisecond))), color: "#d62728"},
			{x: rp99, label: "raw p99 " + fmtDur(time.Duration(rp99*float64(time.Millisecond))), color: "#1f77b4"},
		},
		legendX: 560, legendYOffset: 40,
	}
	var b strings.Builder
	p.draw(&b)
	return svgDoc(760, 400, b.String())
}

func sortedCopy(ds []time.Duration) []time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s
}

// burstSVG draws the million bench's drain: cumulative due, activated
// and received over time from the first due time, and RSS below.
func burstSVG(jet, raw *millionReport) string {
	cum := func(xs []int, bucket time.Duration) [][2]float64 {
		pts := [][2]float64{{0, 0}}
		total := 0
		for i, x := range xs {
			total += x
			pts = append(pts, [2]float64{float64(i+1) * bucket.Seconds(), float64(total)})
		}
		return pts
	}
	line := func(xs []int, bucket time.Duration) [][2]float64 {
		var pts [][2]float64
		for i, x := range xs {
			if x > 0 {
				pts = append(pts, [2]float64{float64(i) * bucket.Seconds(), float64(x)})
			}
		}
		return pts
	}
	maxX := niceCeil(max(float64(len(jet.Due))*jet.Bucket.Seconds(), float64(len(raw.Due))*raw.Bucket.Seconds()))
	want := float64(jet.N - jet.Cancelled)
	p := &plot{
		x0: 90, y0: 40, w: 640, h: 300, maxX: maxX, maxY: niceCeil(want),
		title:  fmt.Sprintf("Burst: %d timeouts due within %v, cumulative", jet.N-jet.Cancelled, jet.Bucket*time.Duration(countDueBuckets(jet.Due))),
		xLabel: "seconds since the first due time", yLabel: "timeouts",
		xFmt: func(x float64) string { return fmt.Sprintf("%g", x) },
		yFmt: func(y float64) string { return groupThousands(int64(y)) },
		series: []series{
			{name: "due", color: "#777", pts: cum(jet.Due, jet.Bucket)},
			{name: "raw activated", color: "#1f77b4", dash: true, pts: cum(raw.Enqueued, raw.Bucket)},
			{name: "raw received", color: "#1f77b4", pts: cum(raw.Received, raw.Bucket)},
			{name: "jetsaga activated (enqueued)", color: "#d62728", dash: true, pts: cum(jet.Enqueued, jet.Bucket)},
			{name: "jetsaga received", color: "#d62728", pts: cum(jet.Received, jet.Bucket)},
		},
		vlines: []vline{
			{x: raw.Drain.Seconds(), label: "raw last " + fmtDur(raw.Drain), color: "#1f77b4"},
			{x: jet.Drain.Seconds(), label: "jetsaga last " + fmtDur(jet.Drain), color: "#d62728"},
		},
		legendX: 540, legendYOffset: 150,
	}
	maxRSS := 0
	for _, r := range [][]int{jet.RSSMiB, raw.RSSMiB} {
		for _, v := range r {
			maxRSS = max(maxRSS, v)
		}
	}
	q := &plot{
		x0: 90, y0: 430, w: 640, h: 160, maxX: maxX, maxY: niceCeil(float64(max(1, maxRSS))),
		title:  "Process RSS (server and client), MiB",
		xLabel: "seconds since the first due time", yLabel: "MiB",
		xFmt: func(x float64) string { return fmt.Sprintf("%g", x) },
		yFmt: func(y float64) string { return fmt.Sprintf("%.0f", y) },
		series: []series{
			{name: fmt.Sprintf("raw (peak %d MiB)", raw.RSSPeak>>20), color: "#1f77b4", pts: line(raw.RSSMiB, raw.Bucket)},
			{name: fmt.Sprintf("jetsaga (peak %d MiB)", jet.RSSPeak>>20), color: "#d62728", pts: line(jet.RSSMiB, jet.Bucket)},
		},
		legendX: 540, legendYOffset: 100,
	}
	var b strings.Builder
	p.draw(&b)
	q.draw(&b)
	return svgDoc(780, 640, b.String())
}

func countDueBuckets(due []int) int {
	last := 0
	for i, d := range due {
		if d > 0 {
			last = i + 1
		}
	}
	return last
}
