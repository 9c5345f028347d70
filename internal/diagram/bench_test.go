package diagram_test

import (
	"testing"

	"github.com/jetsaga/jetsaga/examples/ordermachine"
	"github.com/jetsaga/jetsaga/internal/diagram"
)

// BenchmarkDraw draws the ordermachine example as SVG (with counts, a
// current state and a path, as the console does), beside its baseline,
// the Mermaid text the catalog carries.
func BenchmarkDraw(b *testing.B) {
	o, err := ordermachine.New(ordermachine.Config{})
	if err != nil {
		b.Fatal(err)
	}
	g := toGraph(o.Saga.Describe("orders").Graph)
	h := diagram.Highlight{Current: "Accepted", Counts: map[string]int{"Submitted": 3, "Accepted": 1},
		Path: []diagram.Transition{{From: "Initial", To: "Submitted"}, {From: "Submitted", To: "Accepted"}}}
	b.Run("mermaid", func(b *testing.B) {
		for b.Loop() {
			_ = o.Machine.Mermaid()
		}
	})
	b.Run("svg", func(b *testing.B) {
		for b.Loop() {
			_ = diagram.SVG("order", g, h)
		}
	})
}
