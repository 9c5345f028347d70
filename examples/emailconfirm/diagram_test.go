package emailconfirm_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/jetsaga/jetsaga/examples/emailconfirm"
)

var update = flag.Bool("update", false, "rewrite testdata/emailconfirm.mmd")

// TestDiagram pins the saga's Mermaid diagram (saga.Definition.Mermaid)
// in testdata/emailconfirm.mmd; go test -update rewrites it.
func TestDiagram(t *testing.T) {
	got := emailconfirm.New(emailconfirm.Config{}).Mermaid()
	p := filepath.Join("testdata", "emailconfirm.mmd")
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
