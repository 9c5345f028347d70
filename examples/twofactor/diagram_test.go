package twofactor_test

import (
	"flag"
	"testing"

	"github.com/jetsaga/jetsaga/examples/twofactor"
	"github.com/jetsaga/jetsaga/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite testdata/twofactor.mmd")

// TestDiagram pins the saga's Mermaid diagram (saga.Definition.Mermaid)
// in testdata/twofactor.mmd; go test -update rewrites it.
func TestDiagram(t *testing.T) {
	got := twofactor.New(twofactor.Config{}).Mermaid()
	testutil.Golden(t, "twofactor.mmd", got, *update)
}
