//go:build unix

package main

import (
	"strings"
	"testing"
)

// TestQuick runs the program at a tiny scale, with the 3-node cluster: it
// checks that every stream is written both ways and reported, not what
// the writes cost.
func TestQuick(t *testing.T) {
	var out strings.Builder
	cfg := config{n: 10, rounds: 2, r3: true, dir: t.TempDir()}
	if err := run(t.Context(), cfg, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"\nR1 File ", "\nR1 Memory ", "\nR3 File "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
