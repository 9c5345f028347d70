package saga

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Mermaid returns the saga's diagram as Mermaid text (a flowchart), drawn
// from what the definition declares: the messages that start an instance
// (StartedBy), those an instance handles (Handles), its timeouts
// (OnTimeout) as a loop from the instance back to it, with each type's
// catch-up policy where one is set, and completion. The instance's box
// names the saga and, where set, its data version, the liveness check
// (CheckLiveness) and a NotFoundPolicy other than the default. Aliases
// (Aliased) are drawn as messages of their own.
//
// A handler decides at run time whether it completes the instance
// (Context.MarkComplete), requests a timeout or expects a message, so the
// diagram shows one completion arrow for the saga, not which handlers
// take it. A saga built by package saga/machine is drawn here as the
// plain saga it compiles to; its Machine.Mermaid draws its states.
//
// The text is the same for the same definition, so a golden file can pin
// it; GitHub renders it in Markdown.
func (d *Definition[S]) Mermaid() string {
	type entry struct {
		kind routeKind
		name string
		r    route[S]
	}
	entries := make([]entry, 0, len(d.routes))
	for name, r := range d.routes {
		entries = append(entries, entry{r.kind, name, r})
	}
	slices.SortFunc(entries, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.name, b.name))
	})

	var b strings.Builder
	b.WriteString("flowchart LR\n")
	b.WriteString("    start((start))\n")
	fmt.Fprintf(&b, "    saga[\"%s\"]\n", mermaidLabel(d.instanceLabel()...))
	b.WriteString("    done((completed))\n")
	var handled, timeouts int
	for _, e := range entries {
		switch e.kind {
		case routeStart:
			fmt.Fprintf(&b, "    start -- \"%s\" --> saga\n", mermaidLabel(e.name))
		case routeHandle:
			handled++
			fmt.Fprintf(&b, "    h%d>\"%s\"] --> saga\n", handled, mermaidLabel(e.name))
		case routeTimeout:
			timeouts++
			lines := []string{"timeout " + e.name}
			if cu := e.r.catchUp; cu.set || cu.policy != CatchUpFire {
				lines = append(lines, fmt.Sprintf("catch-up: %s beyond %v", cu.policy, cu.tolerance))
			}
			fmt.Fprintf(&b, "    saga -. RequestTimeout .-> t%d{{\"%s\"}}\n", timeouts, mermaidLabel(lines...))
			fmt.Fprintf(&b, "    t%d -.-> saga\n", timeouts)
		}
	}
	b.WriteString("    saga -- MarkComplete --> done\n")
	return b.String()
}

// instanceLabel is what the instance's box says: the saga's name and
// what its options change.
func (d *Definition[S]) instanceLabel() []string {
	lines := []string{d.name}
	if d.version > 1 {
		lines = append(lines, fmt.Sprintf("data version %d", d.version))
	}
	if d.liveness {
		lines = append(lines, "liveness checked")
	}
	switch p := d.notFound; {
	case p.Handler != nil:
		lines = append(lines, "not found: handler")
	case p.Hook != nil:
		lines = append(lines, "not found: hook")
	case p.DeadLetter:
		lines = append(lines, "not found: dead-letter")
	}
	return lines
}

// mermaidLabel joins lines into the text of a quoted Mermaid label. A
// character that would end the quote, start markup (HTML, Markdown) or
// an entity code is written as a look-alike that Mermaid shows as it is
// (" as ', < and > as ‹ and ›, ` as ', # and & in their full-width
// forms), and a line break as a space, so that no name can change the
// diagram's structure. Mermaid's own entity codes (#quot;) are not used:
// Mermaid 11 shows them as placeholders.
func mermaidLabel(lines ...string) string {
	esc := strings.NewReplacer(
		`"`, "'", "`", "'", "<", "‹", ">", "›", "#", "＃", "&", "＆",
		"\n", " ", "\r", " ",
	)
	for i, l := range lines {
		lines[i] = esc.Replace(l)
	}
	return strings.Join(lines, "<br/>")
}
