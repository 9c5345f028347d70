package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A command jetsaga does not have runs jetsaga-NAME from PATH with the
// words after it, jetsaga's standard streams and its exit code; a known
// plugin that is missing says what installs it; a name that could reach
// another program is refused before PATH is looked at.
func TestPlugins(t *testing.T) {
	dir := t.TempDir()
	script := "#!/bin/sh\necho \"args:$*\"\nread line\necho \"stdin:$line\"\necho oops >&2\nexit ${PLUGIN_EXIT:-0}\n"
	if err := os.WriteFile(filepath.Join(dir, "jetsaga-hello"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	run := func(args ...string) result {
		var out, errb strings.Builder
		code := Run(context.Background(), args, strings.NewReader("typed\n"), &out, &errb)
		return result{out.String(), errb.String(), code}
	}
	r := run("--server", "nats://127.0.0.1:1", "hello", "a", "--b")
	if r.code != 0 || r.stdout != "args:a --b\nstdin:typed\n" || r.stderr != "oops\n" {
		t.Errorf("jetsaga hello a --b: %+v", r)
	}
	t.Setenv("PLUGIN_EXIT", "7")
	if r := run("hello"); r.code != 7 || strings.Contains(r.stderr, "jetsaga:") {
		t.Errorf("a plugin's exit code 7: %+v (want 7, and only the plugin's own words on stderr)", r)
	}
	if r := run("calendars", "export", "pl", "2027..2028"); r.code != ExitUsage ||
		!strings.Contains(r.stderr, "go install github.com/jetsaga/jetsaga/calendar/holidays/cmd/jetsaga-calendars@latest") {
		t.Errorf("a known plugin not installed: %+v", r)
	}
	for _, name := range []string{"nosuch", "..", "../hello", "hello/../hello", "-x", "Hello"} {
		var errb strings.Builder
		c := &call{ctx: context.Background(), stdin: strings.NewReader(""), stdout: &errb, stderr: &errb}
		if err := c.runPlugin(name, nil); !errors.Is(err, ErrNoPlugin) || !errors.Is(err, ErrUsage) || errb.Len() != 0 {
			t.Errorf("plugin %q: %v, output %q; want ErrNoPlugin and nothing run", name, err, errb.String())
		}
	}
	if r := run("--help"); !strings.Contains(r.stdout, "Plugins") || !strings.Contains(r.stdout, "jetsaga-calendars@latest") {
		t.Errorf("usage does not list the plugins:\n%s", r.stdout)
	}
}
