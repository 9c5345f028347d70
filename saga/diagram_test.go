package saga_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
)

type (
	diagramStart   struct{ ID string }
	diagramPay     struct{ ID string }
	diagramRenamed struct{ ID string }
	diagramDue     struct{}
	diagramNag     struct{}
	// hostile's name tries to close the label and draw an edge of its
	// own.
	hostile struct{ ID string }
)

func (diagramRenamed) MessageAliases() []saga.Alias { return []saga.Alias{{Name: "diagram.Old"}} }
func (diagramRenamed) MessageName() string          { return "diagram.Renamed" }
func (hostile) MessageName() string {
	return "evil\"] --> start\n%% x #lt; <b>`"
}

type diagramData struct{ N int }

func diagramSaga(opts ...saga.DefinitionOption) *saga.Definition[diagramData] {
	d := saga.Define[diagramData]("billing", opts...)
	noop := func(context.Context, *saga.Context[diagramData], any) error { return nil }
	saga.StartedBy(d, saga.By(func(m diagramStart) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[diagramData], m diagramStart) error { return noop(ctx, c, m) })
	saga.Handles(d, saga.By(func(m diagramPay) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[diagramData], m diagramPay) error { return noop(ctx, c, m) })
	saga.Handles(d, saga.By(func(m diagramRenamed) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[diagramData], m diagramRenamed) error {
			return noop(ctx, c, m)
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[diagramData], m diagramDue) error { return noop(ctx, c, m) })
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[diagramData], m diagramNag) error { return noop(ctx, c, m) },
		saga.CatchUp(saga.CatchUpCoalesce, time.Hour))
	return d
}

// TestDiagramDeclarations: every starter, handled message (an alias
// too), timeout (with its catch-up policy) and the options that change
// an instance are drawn, in a stable order.
func TestDiagramDeclarations(t *testing.T) {
	d := diagramSaga(saga.CheckLiveness(), saga.DataVersion(2, saga.UpcastBytes(func(b []byte) ([]byte, error) { return b, nil })),
		saga.WhenNotFound(saga.NotFoundPolicy{DeadLetter: true}))
	want := `flowchart LR
    start((start))
    saga["billing<br/>data version 2<br/>liveness checked<br/>not found: dead-letter"]
    done((completed))
    start -- "saga_test.diagramStart" --> saga
    h1>"diagram.Old"] --> saga
    h2>"diagram.Renamed"] --> saga
    h3>"saga_test.diagramPay"] --> saga
    saga -. RequestTimeout .-> t1{{"timeout saga_test.diagramDue"}}
    t1 -.-> saga
    saga -. RequestTimeout .-> t2{{"timeout saga_test.diagramNag<br/>catch-up: coalesce beyond 1h0m0s"}}
    t2 -.-> saga
    saga -- MarkComplete --> done
`
	for range 5 { // map order must not show
		if got := d.Mermaid(); got != want {
			t.Fatalf("got\n%s\nwant\n%s", got, want)
		}
	}
	plain := diagramSaga().Mermaid()
	if !strings.Contains(plain, "    saga[\"billing\"]\n") {
		t.Errorf("a saga with default options: got\n%s", plain)
	}
}

// TestDiagramHostileNames: a message name with quotes, a newline, a
// Mermaid comment, an entity code and markup stays inside its label: the
// diagram keeps one statement a line, each of a shape Mermaid reads as
// intended.
func TestDiagramHostileNames(t *testing.T) {
	d := saga.Define[diagramData]("hostile")
	saga.StartedBy(d, saga.By(func(m hostile) string { return m.ID }),
		func(context.Context, *saga.Context[diagramData], hostile) error { return nil })
	got := d.Mermaid()
	label := `"[^"<>#&\n` + "`" + `]*"`
	line := regexp.MustCompile(`^    (start\(\(start\)\)|saga\[` + label + `\]|done\(\(completed\)\)|start -- ` + label + ` --> saga|saga -- MarkComplete --> done)$`)
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if lines[0] != "flowchart LR" || len(lines) != 6 {
		t.Fatalf("got\n%s", got)
	}
	for _, l := range lines[1:] {
		if !line.MatchString(l) {
			t.Errorf("line %q: not one of the diagram's shapes", l)
		}
	}
	if want := `start -- "evil'] --› start %% x ＃lt; ‹b›'" --> saga`; !strings.Contains(got, want) {
		t.Errorf("got\n%s\nwant a line with %s", got, want)
	}
}
