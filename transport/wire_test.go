package transport

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"

	"github.com/jetsaga/jetsaga/internal/wiretest"
)

// wireDoc is the wire contract, relative to this package's directory.
const wireDoc = "../docs/wire.md"

// wireNames are the constants of package transport that docs/wire.md's
// Names table lists, by the name the table gives them. The rows of
// package saga (saga.TypeProperty, ...) are checked by
// internal/wiretest's TestWireSagaNames: this package's tests cannot
// import saga, which imports transport.
var wireNames = map[string]string{
	"WireVersion":                    strconv.Itoa(WireVersion),
	"DefaultPrefix":                  DefaultPrefix,
	"HeaderMessageID":                HeaderMessageID,
	"HeaderContentType":              HeaderContentType,
	"HeaderCorrelationID":            HeaderCorrelationID,
	"HeaderSessionID":                HeaderSessionID,
	"HeaderPartitionKey":             HeaderPartitionKey,
	"HeaderReplyTo":                  HeaderReplyTo,
	"HeaderSubject":                  HeaderSubject,
	"HeaderScheduledAt":              HeaderScheduledAt,
	"HeaderDeadLetterReason":         HeaderDeadLetterReason,
	"HeaderDeadLetterDescription":    HeaderDeadLetterDescription,
	"HeaderDeadLetterSource":         HeaderDeadLetterSource,
	"HeaderDeadLetterSeq":            HeaderDeadLetterSeq,
	"HeaderPropertyPrefix":           HeaderPropertyPrefix,
	"EscapePrefix":                   EscapePrefix,
	"KindWithID":                     KindWithID,
	"KindWithoutID":                  KindWithoutID,
	"ScheduleToken":                  ScheduleToken,
	"LeaseConsumer":                  LeaseConsumer,
	"ReceiveConsumer":                ReceiveConsumer,
	"MetaPartitions":                 MetaPartitions,
	"MetaRequiresSession":            MetaRequiresSession,
	"MetaConfig":                     MetaConfig,
	"MetaTopic":                      MetaTopic,
	"ReasonMaxDeliveryCountExceeded": ReasonMaxDeliveryCountExceeded,
}

// TestWireNames checks docs/wire.md's Names table against the Go
// constants: every row of package transport has the constant's value,
// and every constant in wireNames has a row.
func TestWireNames(t *testing.T) {
	doc, err := wiretest.ReadDoc(wireDoc)
	if err != nil {
		t.Fatal(err)
	}
	transportRow := func(c string) bool { return !strings.HasPrefix(c, "saga.") }
	for _, e := range wiretest.CheckNames(doc, wireNames, transportRow) {
		t.Errorf("docs/wire.md: %s", e)
	}
}

// TestWireMetaTopic checks that the exported name of a topic's metadata
// key is the one the topic code writes and reads.
func TestWireMetaTopic(t *testing.T) {
	if MetaTopic != metaTopic {
		t.Errorf("MetaTopic is %q, the topic streams' metadata key is %q", MetaTopic, metaTopic)
	}
}

// TestWireConstantsListed checks that every exported constant declared in
// wire.go is in wireNames, so that a name added to the format cannot miss
// its row in the document.
func TestWireConstantsListed(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "wire.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			for _, id := range s.(*ast.ValueSpec).Names {
				if !id.IsExported() {
					continue
				}
				n++
				if _, ok := wireNames[id.Name]; !ok {
					t.Errorf("wire.go declares %s, which wireNames (and so docs/wire.md's Names table) lacks", id.Name)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("wire.go declares no exported constant: the parse went wrong")
	}
}

// TestWireVectors checks docs/wire.md's Test vectors table against the
// functions the transport encodes with. Every function of the table must
// have at least one row.
func TestWireVectors(t *testing.T) {
	doc, err := wiretest.ReadDoc(wireDoc)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, v := range doc.Vectors {
		fn := v.Function
		var got string
		switch {
		case fn == "key":
			got = msgKey(v.Input)
		case fn == "token":
			got = subjectToken(v.Input)
			if back, ok := fromSubjectToken(got); !ok || back != v.Input {
				t.Errorf("docs/wire.md line %d: token %q does not decode back to its input", v.Line, got)
			}
		case strings.HasPrefix(fn, "fnv1a64 mod "):
			n, err := strconv.Atoi(strings.TrimPrefix(fn, "fnv1a64 mod "))
			if err != nil || n <= 0 {
				t.Errorf("docs/wire.md line %d: function %q: the modulus is no positive number", v.Line, fn)
				continue
			}
			got = strconv.Itoa(hashMod(v.Input, n))
			fn = "fnv1a64 mod"
		case fn == "topic value":
			got = filterToken(v.Input, true)
		case fn == "escape":
			got = escapeValue(v.Input)
			if back := unescapeValue(v.Output); back != v.Input {
				t.Errorf("docs/wire.md line %d: unescaping %q gives %q, want %q", v.Line, v.Output, back, v.Input)
			}
		default:
			t.Errorf("docs/wire.md line %d: unknown function %q", v.Line, fn)
			continue
		}
		seen[fn]++
		if got != v.Output {
			t.Errorf("docs/wire.md line %d: %s(%q): got %q, want %q", v.Line, v.Function, v.Input, got, v.Output)
		}
	}
	for _, fn := range []string{"key", "token", "fnv1a64 mod", "topic value", "escape"} {
		if seen[fn] == 0 {
			t.Errorf("docs/wire.md: no test vector for %s", fn)
		}
	}
}
