// Package cli is the jetsaga command: it operates jetsaga's queues,
// scheduled messages, dead letters, saga instances and pending timeouts
// on a NATS server, from the command line or a web console.
//
// cmd/jetsaga is a thin main around [Run]; so is the Temporal-enabled
// build in timeout/temporal/cmd/jetsaga, which adds its engine with
// [WithEngine] (a nested module of this repository may import its internal
// packages). The command's interface is its flags, output and exit codes;
// this package is not an API.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// Exit codes of Run.
const (
	ExitOK       = 0 // success
	ExitError    = 1 // a failure: connection, server, I/O
	ExitUsage    = 2 // bad command line
	ExitNotFound = 3 // a queue, message, sequence number or saga instance does not exist
	// ExitAlreadyActivated: a scheduled message could not be cancelled
	// because it has been or will be delivered.
	ExitAlreadyActivated = 4
	// ExitAborted: a destructive command was not confirmed (declined at
	// the prompt, or stdin is not a terminal and --yes was not given).
	ExitAborted = 5
	// ExitPartial: a batch (resubmit, purge, cancel of several) did only
	// part of its work; the output says what was left and why.
	ExitPartial = 6
	// ExitStuck: sagas stuck listed stuck instances. A check run from cron
	// or an alerting system tells them (7) from none (0) and from a
	// failure to look (1, 2, 3).
	ExitStuck = 7
)

// Errors Run maps to exit codes; commands wrap them.
var (
	ErrUsage    = errors.New("usage")
	ErrNotFound = errors.New("not found")
	ErrAborted  = errors.New("aborted: not confirmed")
	ErrPartial  = errors.New("done in part")
	ErrStuck    = errors.New("stuck instances found")
)

// exitCode maps an error to Run's exit code.
func exitCode(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrUsage), errors.Is(err, flag.ErrHelp):
		return ExitUsage
	case errors.Is(err, ErrAborted):
		return ExitAborted
	case errors.Is(err, ErrPartial):
		return ExitPartial
	case errors.Is(err, ErrStuck):
		return ExitStuck
	case errors.Is(err, transport.ErrAlreadyActivated):
		return ExitAlreadyActivated
	case errors.Is(err, ErrNotFound), errors.Is(err, transport.ErrNotFound),
		errors.Is(err, transport.ErrQueueNotFound), errors.Is(err, transport.ErrTopicNotFound), errors.Is(err, saga.ErrNotFound):
		return ExitNotFound
	}
	return ExitError
}

// Option configures Run.
type Option func(*runConfig)

type runConfig struct {
	engines    map[string]EngineOpener
	isTerminal func(io.Reader) bool
	logger     *slog.Logger
	stores     []*storeFlag // WithStore
}

// EngineOpener opens a timeout engine that jetsaga lists and cancels
// pending timeouts on, beside the transport engine. address and namespace
// come from --temporal-address and --temporal-namespace. The scheduler
// should implement timeout.Lister to be listed; close is called when the
// command ends.
type EngineOpener func(ctx context.Context, address, namespace string) (s EngineScheduler, close func(), err error)

// WithEngine adds a timeout engine under name ("temporal": the engine
// that --temporal-address and --temporal-namespace open). cmd/jetsaga
// registers none, so that the root module does not depend on the
// Temporal SDK; a binary in the Temporal engine's module can call Run
// with WithEngine("temporal", ...) to add it.
func WithEngine(name string, open EngineOpener) Option {
	return func(c *runConfig) { c.engines[name] = open }
}

// WithTerminal overrides how Run tells whether stdin is a terminal, which
// decides whether a destructive command asks for confirmation (for tests
// and for wrappers that prompt otherwise).
func WithTerminal(isTerminal func(io.Reader) bool) Option {
	return func(c *runConfig) { c.isTerminal = isTerminal }
}

// WithLogger sets the logger of the transport and the console. Default:
// warnings and errors to stderr.
func WithLogger(l *slog.Logger) Option {
	return func(c *runConfig) { c.logger = l }
}

// Run runs the jetsaga command with args (without the program name) and
// returns its exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, options ...Option) int {
	rc := runConfig{engines: map[string]EngineOpener{}, isTerminal: isTerminal}
	for _, o := range options {
		o(&rc)
	}
	if rc.logger == nil {
		rc.logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	c := &call{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr, rc: rc}
	err := c.run(args)
	if code, ok := errors.AsType[exitStatus](err); ok {
		return int(code)
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stderr, "jetsaga: %v\n", err)
	}
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	return exitCode(err)
}

// call is one run of the command.
type call struct {
	ctx            context.Context
	stdin          io.Reader
	stdout, stderr io.Writer
	rc             runConfig
	o              opts
	cmd            *command
	args           []string
	env            *env
}

func (c *call) run(args []string) error {
	if i := slices.Index(args, completeCmd); i >= 0 {
		// Connection flags may come first; they stay among the words.
		return c.complete(append(args[:i:i], args[i+1:]...)) // completion.go
	}
	root := flag.NewFlagSet("jetsaga", flag.ContinueOnError)
	root.SetOutput(io.Discard)
	c.o.defaults()
	c.o.register(root, nil)
	c.rc.registerStores(root)
	if err := root.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.usage(c.stdout)
			return flag.ErrHelp
		}
		return fmt.Errorf("%w: %v (jetsaga help)", ErrUsage, err)
	}
	rest := root.Args()
	if len(rest) == 0 {
		c.usage(c.stderr)
		return fmt.Errorf("%w: no command", ErrUsage)
	}
	if rest[0] == "help" {
		return c.help(rest[1:])
	}
	cmd, n := lookup(rest)
	if cmd == nil {
		if g := group(rest[0]); g != "" {
			c.groupUsage(c.stderr, g)
			return fmt.Errorf("%w: %q needs a subcommand", ErrUsage, strings.Join(rest, " "))
		}
		return c.runPlugin(rest[0], rest[1:]) // plugin.go
	}
	c.cmd = cmd
	fs := flag.NewFlagSet("jetsaga "+cmd.path, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.o.register(fs, cmd)
	c.rc.registerStores(fs)
	positional, err := parseInterleaved(fs, rest[n:])
	if errors.Is(err, flag.ErrHelp) {
		c.commandUsage(c.stdout, cmd)
		return flag.ErrHelp
	}
	if err != nil {
		return fmt.Errorf("%w: %v (jetsaga %s --help)", ErrUsage, err, cmd.path)
	}
	if len(positional) < cmd.minArgs || cmd.maxArgs >= 0 && len(positional) > cmd.maxArgs {
		return fmt.Errorf("%w: jetsaga %s %s (jetsaga %s --help)", ErrUsage, cmd.path, cmd.args, cmd.path)
	}
	c.args = positional
	if cmd.noConn {
		return cmd.run(c)
	}
	env, err := connect(c.ctx, c.o, c.rc)
	if err != nil {
		return err
	}
	defer env.close()
	c.env = env
	return cmd.run(c)
}

// parseInterleaved parses flags that may come before, between and after
// positional arguments; "--" ends the flags.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		// fs.Parse stops at the first non-flag, or after "--".
		if consumed := len(args); consumed > 0 && args[0] != "" && !strings.HasPrefix(args[0], "-") {
			positional = append(positional, args[0])
			args = args[1:]
			continue
		}
		return append(positional, args...), nil
	}
}

// isTerminal reports whether r is a character device (a terminal).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// confirm asks before a destructive action: --yes confirms; on a
// terminal the user is asked; otherwise it refuses.
func (c *call) confirm(what string) error {
	if c.o.yes {
		return nil
	}
	if !c.rc.isTerminal(c.stdin) {
		return fmt.Errorf("%w: %s: stdin is not a terminal; pass --yes to confirm", ErrAborted, what)
	}
	fmt.Fprintf(c.stderr, "%s? [y/N] ", what)
	var line string
	buf := make([]byte, 1)
	for {
		n, err := c.stdin.Read(buf)
		if n == 1 && buf[0] != '\n' {
			line += string(buf[0])
			continue
		}
		if n == 1 || err != nil {
			break
		}
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return fmt.Errorf("%w: %s", ErrAborted, what)
}
