// Package temporaltest runs real Temporal dev servers for tests, with
// nothing to install by hand: the temporal CLI (which embeds the server)
// is built from the Go module proxy the first time it is needed, once per
// machine, and each test gets its own server on free ports.
//
//	srv := temporaltest.New(t, temporaltest.Options{})
//	c := srv.Client(t)
//
// The CLI is go install github.com/temporalio/cli/cmd/temporal@CLIVersion,
// built into the user's cache directory (os.UserCacheDir()/jetsaga) under
// a file lock, so that parallel test binaries build it once; a cold build
// takes a few minutes on two cores. Set JETSAGA_TEMPORAL_CLI to the path
// of a temporal binary to use that one instead.
package temporaltest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// CLIVersion is the temporal CLI version CLI installs: the newest that
// installs from the Go module proxy.
const CLIVersion = "v1.5.1"

// CLIModule is the package CLI installs.
const CLIModule = "github.com/temporalio/cli/cmd/temporal"

// EnvCLI names the environment variable that overrides the CLI's path.
const EnvCLI = "JETSAGA_TEMPORAL_CLI"

// CLI returns the path of a temporal CLI: $JETSAGA_TEMPORAL_CLI if set,
// else the one built into the user's cache directory, which it builds
// first if missing (logging to logf, if not nil). Concurrent calls, in
// one process or several, build it once.
func CLI(ctx context.Context, logf func(format string, args ...any)) (string, error) {
	if p := os.Getenv(EnvCLI); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("temporaltest: $%s: %w", EnvCLI, err)
		}
		return p, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("temporaltest: no cache directory for the temporal CLI (set $%s): %w", EnvCLI, err)
	}
	dir := filepath.Join(cache, "jetsaga", "temporal-cli-"+CLIVersion)
	exe := filepath.Join(dir, "temporal")
	if runtime.GOOS == "windows" {
		exe += ".exe"
	}
	if _, err := os.Stat(exe); err == nil {
		return exe, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("temporaltest: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, ".lock"))
	if err != nil {
		return "", fmt.Errorf("temporaltest: locking %s: %w", dir, err)
	}
	defer unlock()
	if _, err := os.Stat(exe); err == nil {
		return exe, nil // another process built it while we waited
	}
	if logf != nil {
		logf("temporaltest: building the temporal CLI %s into %s (once per machine; a few minutes cold)", CLIVersion, dir)
	}
	start := time.Now()
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", fmt.Errorf("temporaltest: %w", err)
	}
	defer os.RemoveAll(tmp)
	goCmd, err := goCommand()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, goCmd, "install", CLIModule+"@"+CLIVersion)
	cmd.Dir = tmp // outside any module or workspace
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOWORK=off", "GOFLAGS=-buildvcs=false", "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("temporaltest: go install %s@%s: %w\n%s", CLIModule, CLIVersion, err, out)
	}
	built := filepath.Join(tmp, filepath.Base(exe))
	if err := os.Rename(built, exe); err != nil { // atomic: readers see all of it or nothing
		return "", fmt.Errorf("temporaltest: %w", err)
	}
	if logf != nil {
		logf("temporaltest: built the temporal CLI in %v", time.Since(start).Round(time.Second))
	}
	return exe, nil
}

// goCommand finds the go command: on $PATH, else in $GOROOT/bin.
func goCommand() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("temporaltest: no go command on $PATH to build the temporal CLI with (set $" + EnvCLI + ")")
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
