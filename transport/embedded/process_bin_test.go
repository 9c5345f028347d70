package embedded

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStartProcessChildBin: StartProcess runs the program ChildBinEnv
// names instead of the current binary. Here that program writes a mark
// and exits without serving, so the start fails with ErrNotReady; with the
// variable ignored, the test binary itself would serve and the start would
// succeed.
func TestStartProcessChildBin(t *testing.T) {
	dir := t.TempDir()
	mark := filepath.Join(dir, "ran")
	bin := filepath.Join(dir, "child.sh")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho \"$@\" > "+mark+"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(ChildBinEnv, bin)
	p, err := StartProcess(Options{})
	if err == nil {
		p.Close()
		t.Fatalf("StartProcess with %s=%s started a server, want the named program run (it serves nothing)", ChildBinEnv, bin)
	}
	if !errors.Is(err, ErrNotReady) {
		t.Errorf("StartProcess: %v, want an error matching %v", err, ErrNotReady)
	}
	got, rerr := os.ReadFile(mark)
	if rerr != nil {
		t.Fatalf("the program %s names never ran: %v (StartProcess: %v)", ChildBinEnv, rerr, err)
	}
	if !strings.Contains(string(got), "-test.run=^$") {
		t.Errorf("the child's arguments %q, want -test.run=^$", got)
	}
}
