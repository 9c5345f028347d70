// Package wiretest proves docs/wire.md, jetsaga wire format v1, with a
// client that jetsaga did not write: its test runs a Node.js program
// (node/client.mjs, the official nats npm package) written from the
// document alone against the twofactor saga on an embedded nats-server,
// and checks what the saga did. The program reads every name, subject and
// test vector from the document at run time, so a one-character change to
// the document that the transport does not follow fails the test.
//
// Its other tests check that what the document cites exists: every
// `jetsaga ...` command (against the command's own table), stream
// metadata key and Go name of packages transport and saga, and that a
// topic's FilterProperties are where it says, by sending to a topic as it
// says.
//
// The package's one export, ReadDoc, parses the document's two tables for
// the agreement tests (transport/wire_test.go and this package's test of
// the names package saga holds).
package wiretest

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
)

// Name is a row of the document's Names table: a Go constant and its
// value.
type Name struct {
	Constant, Value string
	Line            int
}

// Vector is a row of the document's Test vectors table: a function, an
// input and the output it must give. Input and output are the exact text
// between the backticks, spaces included.
type Vector struct {
	Function, Input, Output string
	Line                    int
}

// Doc is what ReadDoc finds in the document.
type Doc struct {
	Names   []Name
	Vectors []Vector
}

var (
	nameRow   = regexp.MustCompile("^\\| `([^`]+)` \\| `([^`]*)` \\|.*\\|$")
	vectorRow = regexp.MustCompile("^\\| ([^|`]+?) \\| `([^`]*)` \\| `([^`]*)` \\|$")
)

// ReadDoc parses the tables of sections "## Names" and "## Test vectors"
// of the document at path. Every row after a table's header must have
// the table's form (a row it cannot read is an error, never skipped), and
// each table must have at least one row.
func ReadDoc(path string) (Doc, error) {
	f, err := os.Open(path)
	if err != nil {
		return Doc{}, err
	}
	defer f.Close()
	var (
		doc     Doc
		section string
		header  int // table lines seen in the section (header, separator)
		line    int
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line++
		text := sc.Text()
		if h, ok := strings.CutPrefix(text, "## "); ok {
			section, header = h, 0
			continue
		}
		if !strings.HasPrefix(text, "|") || section != "Names" && section != "Test vectors" {
			continue
		}
		if header < 2 {
			header++
			continue
		}
		switch section {
		case "Names":
			m := nameRow.FindStringSubmatch(text)
			if m == nil {
				return Doc{}, fmt.Errorf("%s:%d: a Names row not of the form | `Constant` | `value` | ... |: %q", path, line, text)
			}
			doc.Names = append(doc.Names, Name{Constant: m[1], Value: m[2], Line: line})
		case "Test vectors":
			m := vectorRow.FindStringSubmatch(text)
			if m == nil {
				return Doc{}, fmt.Errorf("%s:%d: a Test vectors row not of the form | function | `input` | `output` |: %q", path, line, text)
			}
			doc.Vectors = append(doc.Vectors, Vector{Function: m[1], Input: m[2], Output: m[3], Line: line})
		}
	}
	if err := sc.Err(); err != nil {
		return Doc{}, err
	}
	if len(doc.Names) == 0 {
		return Doc{}, fmt.Errorf("%s: no rows in section Names", path)
	}
	if len(doc.Vectors) == 0 {
		return Doc{}, fmt.Errorf("%s: no rows in section Test vectors", path)
	}
	return doc, nil
}

// CheckNames checks the rows of doc whose constant is in want (the
// constant's name as the document spells it, e.g. "HeaderMessageID" or
// "saga.TypeProperty") against want's values, and that every constant
// of want has exactly one row. Rows for which mine returns false belong to
// another package's check and are skipped; a row for which it returns
// true that want lacks is an error. It returns one line per disagreement.
func CheckNames(doc Doc, want map[string]string, mine func(constant string) bool) []string {
	var errs []string
	seen := map[string]bool{}
	for _, n := range doc.Names {
		if !mine(n.Constant) {
			continue
		}
		if seen[n.Constant] {
			errs = append(errs, fmt.Sprintf("line %d: a second row for %s", n.Line, n.Constant))
			continue
		}
		seen[n.Constant] = true
		v, ok := want[n.Constant]
		switch {
		case !ok:
			errs = append(errs, fmt.Sprintf("line %d: %s is no constant the test knows (add it to the test's map, or fix the row)", n.Line, n.Constant))
		case v != n.Value:
			errs = append(errs, fmt.Sprintf("line %d: %s: the document says %q, the Go constant is %q", n.Line, n.Constant, n.Value, v))
		}
	}
	for _, c := range slices.Sorted(maps.Keys(want)) {
		if !seen[c] {
			errs = append(errs, fmt.Sprintf("%s (%q) has no row in the Names table", c, want[c]))
		}
	}
	return errs
}
