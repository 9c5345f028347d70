// Package diagram draws a saga's state graph as a self-contained SVG: no
// script, no font or stylesheet to fetch, so that the jetsaga command can
// write it to a file and the web console can inline it under its
// Content-Security-Policy. Package saga is its user (Definition.SVG,
// StateGraph.SVG, which convert a saga.StateGraph into a Graph).
//
// The layout is layered: states in columns by their distance from the
// initial state (breadth first; the final state in a column of its own,
// last; states no transition reaches after it), in the graph's order
// within a column. A transition to the next column is a straight arrow;
// one to the same state a loop above it; any other (back, skipping
// columns, within a column) a polyline through a lane of its own below
// the states. Transitions between the same two states share one arrow,
// its labels stacked. Every text is XML-escaped, whatever the names hold.
package diagram
