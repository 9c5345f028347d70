package wiretest_test

import (
	"strings"
	"testing"

	"github.com/jetsaga/jetsaga/internal/wiretest"
	"github.com/jetsaga/jetsaga/saga"
)

// wireDoc is the wire contract, relative to this package's directory.
const wireDoc = "../../docs/wire.md"

// TestWireSagaNames checks the rows of docs/wire.md's Names table that
// name constants of package saga (transport/wire_test.go checks the
// others: it cannot import saga, which imports transport).
func TestWireSagaNames(t *testing.T) {
	doc, err := wiretest.ReadDoc(wireDoc)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"saga.TypeProperty":      saga.TypeProperty,
		"saga.ReasonUnknownType": saga.ReasonUnknownType,
		"saga.ReasonMalformed":   saga.ReasonMalformed,
	}
	sagaRow := func(c string) bool { return strings.HasPrefix(c, "saga.") }
	for _, e := range wiretest.CheckNames(doc, want, sagaRow) {
		t.Errorf("docs/wire.md: %s", e)
	}
}
