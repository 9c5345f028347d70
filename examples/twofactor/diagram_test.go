package twofactor_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/jetsaga/jetsaga/examples/twofactor"
)

var update = flag.Bool("update", false, "rewrite testdata/twofactor.mmd")

// TestDiagram pins the saga's Mermaid diagram (saga.Definition.Mermaid)
// in testdata/twofactor.mmd; go test -update rewrites it.
func TestDiagram(t *testing.T) {
	got := twofactor.New(twofactor.Config{}).Mermaid()
	p := filepath.Join("testdata", "twofactor.mmd")
	if *update {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("diagram: got\n%s\nwant\n%s", got, want)
	}
}
