// Package diagram draws a saga's state graph as a self-contained SVG: no
// script, no font or stylesheet to fetch, so that the jetsaga command can
// write it to a file and the web console can inline it under its
// Content-Security-Policy. Package saga is its user (Definition.SVG,
// StateGraph.SVG, which convert a saga.StateGraph into a Graph).
//
// The layout is layered, top to bottom, in the manner of Graphviz dot
// (layout.go says how): no arrow runs through a state's box or a label,
// no label touches a box, and the drawing carries its size and a
// viewBox with CSS max-width: 100%, so that a page narrower than it
// scales it down. Transitions between the same two states share one
// arrow, its labels stacked; transitions to the same state are a loop to
// its right. Every text is XML-escaped, whatever the names hold.
package diagram
