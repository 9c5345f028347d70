package cli

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// docs/operating.md's section "`--json` output" is the contract of the
// command's JSON output: which object each command prints, and each
// object's field names. The tests here hold the section to the code: the
// Go types' JSON names, and what the commands print on a real server.

const operatingDoc = "../../docs/operating.md"

// jsonObject is a row of the section's objects table.
type jsonObject struct {
	fields   []string          // in the document's order
	refs     map[string]string // field → the object it holds (a list of, or one)
	optional map[string]bool   // left out when empty
	line     int
}

// jsonDoc is what the section says.
type jsonDoc struct {
	prints  map[string][]string // command path → the objects it may print; "[]x" is a list of x
	objects map[string]*jsonObject
}

var (
	printsAlt = regexp.MustCompile(`(a list of |an? )\*([a-z-]+)\*`)
	objRef    = regexp.MustCompile(`^\((?:list of \*([a-z-]+)\*|an? \*([a-z-]+)\*)\)`)
	fieldName = regexp.MustCompile("^`([A-Za-z0-9_]+)`")
	backtick  = regexp.MustCompile("`([^`]+)`")
)

func readJSONDoc(t *testing.T) jsonDoc {
	t.Helper()
	b, err := os.ReadFile(operatingDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := jsonDoc{prints: map[string][]string{}, objects: map[string]*jsonObject{}}
	in, table := false, 0
	for i, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "#") {
			in = line == "### `--json` output"
			continue
		}
		if !in {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := splitRow(line)
		switch {
		case cells[0] == "command":
			table = 1
			continue
		case cells[0] == "object":
			table = 2
			continue
		case strings.HasPrefix(cells[0], "---"):
			continue
		}
		switch table {
		case 1:
			var alts []string
			for _, m := range printsAlt.FindAllStringSubmatch(cells[1], -1) {
				if m[1] == "a list of " {
					alts = append(alts, "[]"+m[2])
				} else {
					alts = append(alts, m[2])
				}
			}
			if len(alts) == 0 {
				t.Fatalf("docs/operating.md line %d: no object in %q", i+1, cells[1])
			}
			for _, m := range backtick.FindAllStringSubmatch(cells[0], -1) {
				doc.prints[m[1]] = alts
			}
		case 2:
			o := &jsonObject{refs: map[string]string{}, optional: map[string]bool{}, line: i + 1}
			for _, item := range splitTop(cells[1]) {
				m := fieldName.FindStringSubmatch(item)
				if m == nil {
					t.Fatalf("docs/operating.md line %d: field %q is not of the form `name` (...)", i+1, item)
				}
				o.fields = append(o.fields, m[1])
				rest := strings.TrimSpace(item[len(m[0]):])
				if r := objRef.FindStringSubmatch(rest); r != nil {
					o.refs[m[1]] = r[1] + r[2]
				}
			}
			if len(cells) > 2 {
				for _, m := range backtick.FindAllStringSubmatch(cells[2], -1) {
					o.optional[m[1]] = true
				}
			}
			doc.objects[cells[0]] = o
		}
	}
	if len(doc.prints) == 0 || len(doc.objects) == 0 {
		t.Fatal("docs/operating.md: no section \"### `--json` output\" with its two tables")
	}
	return doc
}

// splitRow splits a table row into its trimmed cells.
func splitRow(line string) []string {
	cells := strings.Split(strings.Trim(line, "|"), "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

// splitTop splits s at the commas outside parentheses.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(out, strings.TrimSpace(s[start:]))
}

// jsonTypes are the Go types of the objects that have one; the others
// (purge-result, cancel-timeouts-result) are anonymous structs, checked
// by TestJSONOutputAsDocumented on what the commands print.
var jsonTypes = map[string]reflect.Type{
	"queue":               reflect.TypeFor[QueueInfo](),
	"queue-show":          reflect.TypeFor[QueueShow](),
	"key-work":            reflect.TypeFor[KeyWork](),
	"page":                reflect.TypeFor[BrowsePage](),
	"message":             reflect.TypeFor[MessageView](),
	"cancel-outcome":      reflect.TypeFor[CancelOutcome](),
	"dead-letter-outcome": reflect.TypeFor[DeadLetterOutcome](),
	"topic":               reflect.TypeFor[TopicInfo](),
	"subscription":        reflect.TypeFor[SubscriptionInfo](),
	"filter":              reflect.TypeFor[FilterView](),
	"saga-type":           reflect.TypeFor[SagaType](),
	"instance-page":       reflect.TypeFor[InstancePage](),
	"instance":            reflect.TypeFor[InstanceView](),
	"timeout":             reflect.TypeFor[TimeoutView](),
	"cancelled-timeout":   reflect.TypeFor[saga.PendingTimeout](),
	"calendar-ref":        reflect.TypeFor[calendar.Ref](),
	"stuck-instance":      reflect.TypeFor[StuckView](),
	"pending-timeout":     reflect.TypeFor[PendingView](),
	"replan-outcome":      reflect.TypeFor[ReplanView](),
	"migrate-outcome":     reflect.TypeFor[MigrateView](),
	"drain-report":        reflect.TypeFor[DrainView](),
	"saga-diagram":        reflect.TypeFor[DiagramView](),
	"state-graph":         reflect.TypeFor[saga.StateGraph](),
	"graph-transition":    reflect.TypeFor[saga.GraphTransition](),
}

// TestJSONOutputDocumented checks the section against the code: every
// command with --json has a row and every row names such a command; every
// object a command prints has a row; and each object with a Go type has
// exactly the type's JSON field names, in its order, the same ones left
// out when empty (omitempty, omitzero), and holds the objects the
// document says.
func TestJSONOutputDocumented(t *testing.T) {
	doc := readJSONDoc(t)
	for _, c := range commands {
		if c.flags&fJSON == 0 {
			if _, ok := doc.prints[c.path]; ok {
				t.Errorf("docs/operating.md: `%s` has a row but no --json", c.path)
			}
			continue
		}
		alts, ok := doc.prints[c.path]
		if !ok {
			t.Errorf("docs/operating.md: `%s` takes --json and has no row in the commands table", c.path)
		}
		for _, a := range alts {
			if doc.objects[strings.TrimPrefix(a, "[]")] == nil {
				t.Errorf("docs/operating.md: `%s` prints %s, which has no row in the objects table", c.path, a)
			}
		}
	}
	for p := range doc.prints {
		if cmd, n := lookup(strings.Fields(p)); cmd == nil || n != len(strings.Fields(p)) {
			t.Errorf("docs/operating.md: `%s` is no command", p)
		}
	}
	for name, o := range doc.objects {
		typ, ok := jsonTypes[name]
		if !ok {
			continue
		}
		var fields []string
		optional := map[string]bool{}
		for f := range typ.Fields() {
			if !f.IsExported() {
				continue
			}
			tag := f.Tag.Get("json")
			n, opts, _ := strings.Cut(tag, ",")
			if n == "-" {
				continue
			}
			if n == "" {
				n = f.Name
			}
			fields = append(fields, n)
			if strings.Contains(","+opts+",", ",omitempty,") || strings.Contains(","+opts+",", ",omitzero,") {
				optional[n] = true
			}
			if ref, ok := o.refs[n]; ok {
				et := f.Type
				for et.Kind() == reflect.Slice || et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				if jsonTypes[ref] != et {
					t.Errorf("docs/operating.md line %d: %s's `%s` holds %s, the Go field %s.%s is a %s", o.line, name, n, ref, typ.Name(), f.Name, f.Type)
				}
			}
		}
		if !slices.Equal(fields, o.fields) {
			t.Errorf("docs/operating.md line %d: %s has fields %q, the Go type %s %q", o.line, name, o.fields, typ, fields)
		}
		for n := range optional {
			if !o.optional[n] {
				t.Errorf("docs/operating.md line %d: %s's `%s` is left out when empty (%s), the document does not say so", o.line, name, n, typ)
			}
		}
		for n := range o.optional {
			if !optional[n] {
				t.Errorf("docs/operating.md line %d: %s's `%s` is always printed (%s), the document says it is left out when empty", o.line, name, n, typ)
			}
		}
	}
}

// TestJSONOutputAsDocumented runs the commands with --json on a real
// server and checks what they print against the section: the object (or
// list) it names, every field it prints documented, every field not left
// out when empty printed.
func TestJSONOutputAsDocumented(t *testing.T) {
	doc := readJSONDoc(t)
	w := setUp(t)
	sched := jsonOf[BrowsePage](w, 0, "queues", "browse", w.queue, "--state", "scheduled")
	if len(sched.Messages) == 0 {
		t.Fatal("no scheduled message to cancel")
	}
	runs := []struct {
		path string
		code int
		args []string
	}{
		{"queues list", 0, nil},
		{"queues browse", 0, []string{w.queue}},
		{"queues peek", 0, []string{w.queue, "--body"}},
		{"dlq list", 0, []string{w.queue}},
		{"topics list", 0, nil},
		{"sagas list", 0, nil},
		{"sagas list", 0, []string{"order"}},
		{"sagas show", 0, []string{"order", "o1"}},
		{"sagas find", 0, []string{"order", "order=o1"}},
		{"sagas reindex", 0, []string{"order", "--queue", w.queue}},
		{"sagas stuck", 0, nil},
		{"timeouts list", 0, nil},
		{"scheduled cancel", 0, []string{w.queue, transport.FormatSeq(sched.Messages[0].Seq), "--yes"}},
		{"sagas cancel-timeouts", 0, []string{"order", "o2", "--yes"}},
		{"dlq purge", 0, []string{w.queue, "--all", "--yes"}},
	}
	for _, r := range runs {
		out := w.must(r.code, append(append(strings.Fields(r.path), r.args...), "--json")...)
		var v any
		if err := json.Unmarshal([]byte(out.stdout), &v); err != nil {
			t.Errorf("jetsaga %s --json: %v\n%s", r.path, err, out.stdout)
			continue
		}
		var errs []string
		for _, alt := range doc.prints[r.path] {
			errs = checkJSON(doc, v, alt, r.path)
			if len(errs) == 0 {
				break
			}
		}
		for _, e := range errs {
			t.Errorf("jetsaga %s %s --json: %s", r.path, strings.Join(r.args, " "), e)
		}
	}
}

// checkJSON checks v against the object (or "[]object") name of doc.
func checkJSON(doc jsonDoc, v any, name, at string) []string {
	if el, ok := strings.CutPrefix(name, "[]"); ok {
		l, ok := v.([]any)
		if !ok {
			return []string{at + ": not a list"}
		}
		var errs []string
		for _, x := range l {
			errs = append(errs, checkJSON(doc, x, el, at+"[]")...)
		}
		return errs
	}
	o := doc.objects[name]
	m, ok := v.(map[string]any)
	if o == nil || !ok {
		return []string{at + ": not an object " + name}
	}
	var errs []string
	for k, x := range m {
		if !slices.Contains(o.fields, k) {
			errs = append(errs, at+": field "+k+" is not documented for "+name)
			continue
		}
		if ref, ok := o.refs[k]; ok && x != nil {
			if _, isList := x.([]any); isList {
				ref = "[]" + ref
			}
			errs = append(errs, checkJSON(doc, x, ref, at+"."+k)...)
		}
	}
	for _, f := range o.fields {
		if _, ok := m[f]; !ok && !o.optional[f] {
			errs = append(errs, at+": documented field "+f+" of "+name+" is missing")
		}
	}
	return errs
}
