package machine

import (
	"strings"
)

// Mermaid returns the machine's state diagram as Mermaid text
// (stateDiagram-v2), drawn from its definition: each state, and for each
// event it accepts an arrow to every state its activity may transition
// to (a guarded one labelled [if] or [else]), or back to itself if it
// changes no state. Initial is entered from the start mark, Final leads
// to the end mark. Mermaid draws it (GitHub renders it in Markdown).
// The text is the same for the same definition, so a golden file can
// pin it.
func (m *Machine[S]) Mermaid() string {
	var b strings.Builder
	b.WriteString("stateDiagram-v2\n")
	b.WriteString("    [*] --> Initial\n")
	for _, st := range m.allStates() {
		for _, e := range m.edgesFrom(st) {
			label := m.label(e.event)
			if e.guard != "" {
				label += " [" + e.guard + "]"
			}
			b.WriteString("    " + st + " --> " + e.to + " : " + mermaidText(label) + "\n")
		}
	}
	b.WriteString("    Final --> [*]\n")
	return b.String()
}

// mermaidText keeps a label to characters Mermaid reads as text.
func mermaidText(s string) string {
	return strings.NewReplacer(":", " ", ";", " ", "\n", " ", "#", " ").Replace(s)
}
