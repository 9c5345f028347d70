package machine_test

import (
	"flag"
	"testing"

	"github.com/jetsaga/jetsaga/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func golden(t *testing.T, name, got string) { testutil.Golden(t, name, got, *update) }

func TestMermaid(t *testing.T) {
	golden(t, "order.mmd", newOrderMachine(t).m.Mermaid())
}
