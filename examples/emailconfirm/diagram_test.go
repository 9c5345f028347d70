package emailconfirm_test

import (
	"flag"
	"testing"

	"github.com/jetsaga/jetsaga/examples/emailconfirm"
	"github.com/jetsaga/jetsaga/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite testdata/emailconfirm.mmd")

// TestDiagram pins the saga's Mermaid diagram (saga.Definition.Mermaid)
// in testdata/emailconfirm.mmd; go test -update rewrites it.
func TestDiagram(t *testing.T) {
	got := emailconfirm.New(emailconfirm.Config{}).Mermaid()
	testutil.Golden(t, "emailconfirm.mmd", got, *update)
}
