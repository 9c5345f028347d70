package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// Golden compares got with the file testdata/name, failing t where they
// differ; with update (a test's -update flag) it writes got there first.
func Golden(t testing.TB, name, got string, update bool) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it): got\n%s\nwant\n%s", path, got, want)
	}
}
