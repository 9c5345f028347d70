package demo

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// Printer writes a demo's lines, from any goroutine. Say stamps a line
// with the time since Start and whom it is about.
type Printer struct {
	mu    sync.Mutex
	w     io.Writer
	who   int       // width of the who column
	start time.Time // zero until Start
}

// NewPrinter returns a Printer on w whose who column is whoWidth wide: the
// longest name in the demo's scenario.
func NewPrinter(w io.Writer, whoWidth int) *Printer {
	return &Printer{w: w, who: whoWidth}
}

// Printf writes a line without a timestamp.
func (p *Printer) Printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format+"\n", args...)
}

// Write writes b as it is, for functions that report to an io.Writer, such
// as Connect.
func (p *Printer) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.w.Write(b)
}

// Say writes a line stamped with the time since the start and who it is
// about.
func (p *Printer) Say(who, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "%8s  %-*s  %s\n", p.at(time.Now()), p.who, who, fmt.Sprintf(format, args...))
}

// Start makes the timestamps count from now.
func (p *Printer) Start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.start = time.Now()
}

// Started returns the time the timestamps count from.
func (p *Printer) Started() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.start
}

// At formats t as an offset from the start: +1.234s.
func (p *Printer) At(t time.Time) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.at(t)
}

func (p *Printer) at(t time.Time) string {
	return fmt.Sprintf("%+.3fs", t.Sub(p.start).Seconds())
}
