package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
)

// Plugins. A command jetsaga does not have, NAME, runs the program
// jetsaga-NAME found on PATH with the words after NAME, as git and kubectl
// do; its standard streams are jetsaga's and its exit code is jetsaga's.
// The plugins jetsaga knows of are listed in its usage with the command
// that installs them; a known plugin that is not installed is a usage
// error saying that command.

// ErrNoPlugin is returned for a command that is neither jetsaga's nor a
// plugin on PATH.
var ErrNoPlugin = errors.New("no such command or plugin")

// knownPlugins are the plugins jetsaga's modules ship: name → what
// installs it.
var knownPlugins = []struct{ name, install, short string }{
	{"calendars", "go install github.com/jetsaga/jetsaga/calendar/holidays/cmd/jetsaga-calendars@latest",
		"write countries' holiday calendars as calendar files (export CODE FIRST..LAST, list)"},
}

// pluginName is what a plugin's name may be: no path separators, no
// option-like names.
var pluginName = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)

// exitStatus carries a plugin's exit code through call.run to Run, which
// returns it without printing anything (the plugin has said why).
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// runPlugin runs jetsaga-name with args, or says why it cannot.
func (c *call) runPlugin(name string, args []string) error {
	hint := "jetsaga help"
	for _, p := range knownPlugins {
		if p.name == name {
			hint = "it is a plugin: " + p.install
		}
	}
	if !pluginName.MatchString(name) {
		return fmt.Errorf("%w: %w: %q (jetsaga help)", ErrUsage, ErrNoPlugin, name)
	}
	path, err := exec.LookPath("jetsaga-" + name)
	if err != nil {
		return fmt.Errorf("%w: %w: %q: jetsaga-%s is not on PATH (%s)", ErrUsage, ErrNoPlugin, name, name, hint)
	}
	cmd := exec.CommandContext(c.ctx, path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.stdin, c.stdout, c.stderr
	cmd.Env = os.Environ()
	if err := cmd.Run(); err != nil {
		if ee, ok := errors.AsType[*exec.ExitError](err); ok && ee.ExitCode() > 0 {
			return exitStatus(ee.ExitCode())
		}
		return fmt.Errorf("plugin jetsaga-%s: %w", name, err)
	}
	return nil
}
