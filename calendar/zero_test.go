package calendar

import (
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// exportedTypes returns the names of the exported types the package declares, from its
// source files (tests apart).
func exportedTypes(t *testing.T) []string {
	t.Helper()
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var names []string
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, s := range g.Specs {
				if name := s.(*ast.TypeSpec).Name.Name; ast.IsExported(name) {
					names = append(names, name)
				}
			}
		}
	}
	return names
}

// Every exported value type users may keep in saga data decodes its zero value, encoded, to
// the zero value, alone and as a field of a struct. A type the package adds must be listed
// here, as a value type or with the reason it is not one.
func TestZeroValuesRoundTrip(t *testing.T) {
	values := map[string]any{
		"Clock":   Clock{},
		"Date":    Date{},
		"Holiday": Holiday{},
		"Kind":    Kind(""),
		"Ref":     Ref{},
		"Rule":    Rule{},
	}
	notValues := map[string]string{
		"Calendar": "an interface",
		"Option":   "a function",
		"Registry": "holds a mutex; used by pointer",
		"Standard": "unexported fields; used by pointer, built by New",
		"Zones":    "holds a mutex; used by pointer",
	}
	for _, name := range exportedTypes(t) {
		zero, ok := values[name]
		if !ok {
			if _, ok := notValues[name]; !ok {
				t.Errorf("exported type %s: list it in this test, with its zero value or why it is not a value", name)
			}
			continue
		}
		typ := reflect.TypeOf(zero)
		// Alone.
		b, err := json.Marshal(zero)
		if err != nil {
			t.Errorf("%s: marshal zero value: %v", name, err)
			continue
		}
		p := reflect.New(typ)
		if err := json.Unmarshal(b, p.Interface()); err != nil {
			t.Errorf("%s: unmarshal %s: %v", name, b, err)
			continue
		}
		if got := p.Elem().Interface(); !reflect.DeepEqual(got, zero) {
			t.Errorf("%s: %s decodes to %#v, want the zero value", name, b, got)
		}
		// As a field beside another, as saga data holds it.
		st := reflect.StructOf([]reflect.StructField{
			{Name: "V", Type: typ},
			{Name: "N", Type: reflect.TypeOf(0)},
		})
		v := reflect.New(st)
		v.Elem().Field(1).SetInt(7)
		b, err = json.Marshal(v.Interface())
		if err != nil {
			t.Errorf("%s in a struct: marshal: %v", name, err)
			continue
		}
		w := reflect.New(st)
		if err := json.Unmarshal(b, w.Interface()); err != nil {
			t.Errorf("%s in a struct: unmarshal %s: %v", name, b, err)
			continue
		}
		if !reflect.DeepEqual(w.Elem().Interface(), v.Elem().Interface()) {
			t.Errorf("%s in a struct: %s decodes to %#v", name, b, w.Elem().Interface())
		}
	}
}

// The repro of the defect: saga data with an unset rule.
func TestZeroRuleInData(t *testing.T) {
	type D struct {
		R Rule
		N int
	}
	b, err := json.Marshal(D{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	var d D
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	if d != (D{N: 1}) {
		t.Errorf("got %+v", d)
	}
	for _, s := range []string{`null`, `{}`, `{"kind":""}`} {
		r := BusinessDays(1)
		if err := json.Unmarshal([]byte(s), &r); err != nil {
			t.Errorf("%s: %v", s, err)
		}
		want := Rule{}
		if s == "null" {
			want = BusinessDays(1) // null leaves a value as it is, as encoding/json does
		}
		if r != want {
			t.Errorf("%s decodes to %#v, want %#v", s, r, want)
		}
	}
	// A zero rule with something else set is no rule at all: an error.
	var r Rule
	if err := json.Unmarshal([]byte(`{"kind":"","n":3}`), &r); !errors.Is(err, ErrInvalidRule) {
		t.Errorf(`{"kind":"","n":3}: %v, want ErrInvalidRule`, err)
	}
}

// The zero rule computes to an error that says so, not a panic and not an instant.
func TestZeroRuleDue(t *testing.T) {
	from := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	var r Rule
	const want = "calendar: invalid rule: the zero Rule, which names no due time"
	if _, err := r.Due(from, testCalendar(t)); !errors.Is(err, ErrInvalidRule) || err.Error() != want {
		t.Errorf("Due: %v, want %q", err, want)
	}
	if _, err := r.DueIn(from, nil, time.UTC); !errors.Is(err, ErrInvalidRule) || err.Error() != want {
		t.Errorf("DueIn: %v, want %q", err, want)
	}
	if err := r.Validate(); !errors.Is(err, ErrInvalidRule) || err.Error() != want {
		t.Errorf("Validate: %v, want %q", err, want)
	}
	if r != (Rule{}) {
		t.Error("not zero")
	}
	if got := r.String(); got != "no rule" {
		t.Errorf("String: %q, want \"no rule\"", got)
	}
}
