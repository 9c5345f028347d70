// Package doccheck holds the test that keeps the repository's Markdown
// documentation honest: every relative link resolves (files and heading
// anchors), and every Go snippet is gofmt-clean and quoted from Go code that
// the build compiles. It has no API.
package doccheck
