package main

import "testing"

// TestDemo runs the demo as go run does; it fails if the users table does
// not end with ann confirmed and bob released.
func TestDemo(t *testing.T) {
	if err := run(t.Context()); err != nil {
		t.Fatal(err)
	}
}
