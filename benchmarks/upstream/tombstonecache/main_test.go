//go:build unix

package main

import (
	"strings"
	"testing"
	"time"
)

// TestQuick runs the program at a tiny scale, as -quick does: it checks
// that it runs through and prints both cases, not what they measure.
func TestQuick(t *testing.T) {
	var out strings.Builder
	cfg := config{n: 200, age: time.Second, spread: 100 * time.Millisecond, reader: "source", dir: t.TempDir()}
	if err := run(t.Context(), cfg, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"\nold ", "\nyoung ", "old/young"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestRefusesBadConfig(t *testing.T) {
	for _, cfg := range []config{
		{n: 0, age: time.Second, spread: time.Second, reader: "source"},
		{n: 1, age: time.Millisecond, spread: time.Second, reader: "source"},
		{n: 1, age: time.Second, spread: time.Second, reader: "consumer"},
	} {
		if err := run(t.Context(), cfg, &strings.Builder{}); err == nil {
			t.Errorf("run(%+v): got nil, want an error", cfg)
		}
	}
}
