package sagatest_test

import (
	"os"
	"os/exec"
	"regexp"
	"testing"
)

// childEnv names the test that a child process of the test binary runs
// for expectFailure.
const childEnv = "SAGATEST_EXPECT_FAILURE"

// expectFailure runs body in a child process of the test binary, as the
// test of the same name, and returns what the child printed; it fails the
// test if the child passes. This is how a test checks what a failing
// sagatest test reports, with its file and line. In the child, it runs
// body and ends the test.
func expectFailure(t *testing.T, body func(t *testing.T)) string {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		body(t)
		t.SkipNow() // still a failure if body failed
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1", "-test.shuffle=off")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("%s passed in a child process; want it to fail:\n%s", t.Name(), out)
	}
	return string(out)
}
