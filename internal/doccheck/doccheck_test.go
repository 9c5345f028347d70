package doccheck

import (
	"bytes"
	"go/format"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is the repository's top directory, from this package's.
const root = "../.."

// docs returns the Markdown files users read: the top-level ones and
// everything under docs/.
func docs(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CHANGELOG.md", "BENCHMARKS.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel(root, path)
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A fenced block: its language and body.
var fence = regexp.MustCompile("(?ms)^```([a-z]*)\n(.*?)^```\n")

// prose is text with fenced blocks and inline code spans removed, where
// link syntax means a link.
func prose(md string) string {
	md = fence.ReplaceAllString(md, "")
	return regexp.MustCompile("`[^`\n]*`").ReplaceAllString(md, "")
}

var (
	link    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
)

// slug is GitHub's anchor for a heading: lower case, punctuation other
// than '-' and '_' dropped, spaces as '-'.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 0x7f:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func anchors(md string) []string {
	var out []string
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(md, ""), -1) {
		out = append(out, slug(m[1]))
	}
	return out
}

// TestLinksResolve checks every relative link of the documentation: the
// file exists, and an anchor into a Markdown file names one of its headings.
func TestLinksResolve(t *testing.T) {
	for _, doc := range docs(t) {
		md := read(t, doc)
		for _, m := range link.FindAllStringSubmatch(prose(md), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := doc
			if path != "" {
				file = filepath.Join(filepath.Dir(doc), path)
				if _, err := os.Stat(filepath.Join(root, file)); err != nil {
					t.Errorf("%s: link %q: %s does not exist", doc, target, file)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(file, ".md") && !slices.Contains(anchors(read(t, file)), anchor) {
				t.Errorf("%s: link %q: %s has no heading #%s (it has %q)", doc, target, file, anchor, anchors(read(t, file)))
			}
		}
	}
}

// goSources returns every Go file of the repository (all modules), as
// lines stripped of indentation, blank lines dropped.
func goSources(t *testing.T) map[string][]string {
	t.Helper()
	out := make(map[string][]string)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			out[path] = normalize(string(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func normalize(code string) []string {
	var out []string
	for l := range strings.Lines(code) {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// elided reports whether a snippet's line stands for code left out.
func elided(line string) bool { return line == "// ..." || line == "..." }

// chunks splits a snippet at its elisions.
func chunks(code string) [][]string {
	var out [][]string
	var cur []string
	for _, l := range normalize(code) {
		if elided(l) {
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = nil
			continue
		}
		cur = append(cur, l)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// quotedIn reports whether the chunks appear in src in order, each as a
// contiguous run of lines.
func quotedIn(cs [][]string, src []string) bool {
	from := 0
	for _, c := range cs {
		i := index(src[from:], c)
		if i < 0 {
			return false
		}
		from += i + len(c)
	}
	return true
}

func index(src, run []string) int {
	for i := 0; i+len(run) <= len(src); i++ {
		if slices.Equal(src[i:i+len(run)], run) {
			return i
		}
	}
	return -1
}

// TestGoSnippetsCompile checks that every Go snippet of the documentation
// is gofmt-clean and quoted from a Go file of the repository — which
// `make test` compiles (go vet builds every package and its tests) — so
// that a snippet that no longer compiles cannot stay in the docs. A line
// "// ..." in a snippet stands for code left out.
func TestGoSnippetsCompile(t *testing.T) {
	sources := goSources(t)
	n := 0
	for _, doc := range docs(t) {
		for _, m := range fence.FindAllStringSubmatch(read(t, doc), -1) {
			if m[1] != "go" {
				continue
			}
			n++
			code := m[2]
			if formatted, err := format.Source([]byte(code)); err != nil {
				t.Errorf("%s: Go snippet does not parse: %v\n%s", doc, err, code)
			} else if !bytes.Equal(formatted, []byte(code)) {
				t.Errorf("%s: Go snippet is not gofmt-clean:\n%s\ngofmt:\n%s", doc, code, formatted)
			}
			cs := chunks(code)
			found := false
			for _, src := range sources {
				if quotedIn(cs, src) {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s: Go snippet is not quoted from any Go file of the repository (quote compiled code, \"// ...\" for what is left out):\n%s", doc, code)
			}
		}
	}
	if n == 0 {
		t.Fatal("no Go snippets found: is the fence pattern right?")
	}
}

// TestSlug pins the anchor rule the link check uses.
func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"Timeouts on time: early activation": "timeouts-on-time-early-activation",
		"The `jetsaga` command":              "the-jetsaga-command",
		"A saga in a few dozen lines":        "a-saga-in-a-few-dozen-lines",
		"Guarantees, in short":               "guarantees-in-short",
	} {
		if got := slug(h); got != want {
			t.Errorf("slug(%q) = %q, want %q", h, got, want)
		}
	}
}
