package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Shell completion. The scripts `jetsaga completion SHELL` prints are
// small: each asks the binary itself for the candidates of the word being
// typed (`jetsaga __complete WORD...`, the words after "jetsaga", the
// last one the partial word), as cobra-based tools do, so that commands,
// flags and names from the server (queues, topics, saga types, schedules)
// come from the same command table and connection flags as the command
// itself, in every shell.

func init() {
	commands = append(commands, &command{path: "completion", args: "bash|zsh|fish", minArgs: 1, maxArgs: 1, noConn: true,
		short: "print a shell completion script: commands, flags, and queue, topic, saga and schedule names from the server",
		long: `Completes commands and flags, and — connecting as the command would, with
the connection flags typed so far or $NATS_URL, within 2 seconds — queue,
topic, saga type and schedule names. Load it in your shell's startup file.`,
		examples: []string{"source <(jetsaga completion bash)        # ~/.bashrc",
			"jetsaga completion zsh > \"${fpath[1]}/_jetsaga\"   # zsh (compinit)",
			"jetsaga completion fish > ~/.config/fish/completions/jetsaga.fish"},
		run: cmdCompletion})
}

const completeCmd = "__complete"

var completionScripts = map[string]string{
	"bash": `# bash completion for jetsaga
_jetsaga() {
	local IFS=$'\n'
	COMPREPLY=($(jetsaga __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null))
}
complete -o default -F _jetsaga jetsaga
`,
	"zsh": `#compdef jetsaga
# zsh completion for jetsaga
_jetsaga() {
	local -a candidates
	candidates=("${(@f)$(jetsaga __complete "${(@)words[2,CURRENT]}" 2>/dev/null)}")
	compadd -a candidates
}
if [ "$funcstack[1]" = "_jetsaga" ]; then
	_jetsaga "$@"
else
	compdef _jetsaga jetsaga
fi
`,
	"fish": `# fish completion for jetsaga
complete -c jetsaga -f -a '(jetsaga __complete (commandline -opc)[2..-1] (commandline -ct) 2>/dev/null)'
`,
}

func cmdCompletion(c *call) error {
	script, ok := completionScripts[c.args[0]]
	if !ok {
		return fmt.Errorf("%w: shell %q: bash, zsh or fish", ErrUsage, c.args[0])
	}
	_, err := io.WriteString(c.stdout, script)
	return err
}

// complete prints the candidates for the last of words (the words after
// "jetsaga"; the last may be empty), one a line.
func (c *call) complete(words []string) error {
	if len(words) == 0 {
		words = []string{""}
	}
	cur, prev := words[len(words)-1], words[:len(words)-1]
	root := flag.NewFlagSet("jetsaga", flag.ContinueOnError)
	root.SetOutput(io.Discard)
	c.o.defaults()
	c.o.register(root, nil)
	c.rc.registerStores(root)
	positional := positionals(root, prev)
	cmd, n := lookup(positional)
	var out []string
	switch {
	case cmd == nil:
		// A command's next word: those of every path the words so far begin.
		for _, k := range commands {
			words := strings.Fields(k.path)
			if len(words) > len(positional) && slices.Equal(words[:len(positional)], positional) {
				out = append(out, words[len(positional)])
			}
		}
		if len(positional) == 0 {
			out = append(out, "help")
		}
	case strings.HasPrefix(cur, "-"):
		fs := flag.NewFlagSet("jetsaga "+cmd.path, flag.ContinueOnError)
		c.o.register(fs, cmd)
		c.rc.registerStores(fs)
		fs.VisitAll(func(f *flag.Flag) { out = append(out, "--"+f.Name) })
		out = append(out, "--help")
	default:
		fs := flag.NewFlagSet("jetsaga "+cmd.path, flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.o.register(fs, cmd)
		c.rc.registerStores(fs)
		args := positionals(fs, positional[n:])
		// Parse what was typed, for the connection flags.
		_ = root.Parse(flagsOnly(root, prev))
		_, _ = parseInterleaved(fs, prev[min(len(prev), n):])
		out = c.names(cmd, len(args))
	}
	seen := map[string]bool{}
	for _, w := range out {
		if strings.HasPrefix(w, cur) && !seen[w] {
			seen[w] = true
			fmt.Fprintln(c.stdout, w)
		}
	}
	return nil
}

// positionals returns the words that are not flags or flags' values, by
// fs's flags (a flag it does not know takes no value).
func positionals(fs *flag.FlagSet, words []string) []string {
	var out []string
	for i := 0; i < len(words); i++ {
		w := words[i]
		if !strings.HasPrefix(w, "-") || w == "-" {
			out = append(out, w)
			continue
		}
		if w == "--" {
			return append(out, words[i+1:]...)
		}
		name := strings.TrimLeft(w, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
				i++ // its value
			}
		}
	}
	return out
}

// flagsOnly returns the flags of words that fs knows, with their values.
func flagsOnly(fs *flag.FlagSet, words []string) []string {
	var out []string
	for i := 0; i < len(words); i++ {
		w := words[i]
		if !strings.HasPrefix(w, "-") || w == "-" || w == "--" {
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(w, "-"), "=")
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		out = append(out, w)
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !hasValue && (!ok || !b.IsBoolFlag()) && i+1 < len(words) {
			i++
			out = append(out, words[i])
		}
	}
	return out
}

// names returns the names the server has for cmd's positional argument
// number i: queues, topics, saga types or schedules, by the argument's
// name in cmd.args. Nothing if it names none of those, or the server
// cannot be asked within 2 seconds.
func (c *call) names(cmd *command, i int) []string {
	fields := strings.Fields(cmd.args)
	if len(fields) == 0 {
		return nil
	}
	arg := strings.Trim(fields[min(i, len(fields)-1)], "[].")
	if i >= len(fields) && !strings.HasSuffix(fields[len(fields)-1], "...]") && !strings.HasSuffix(fields[len(fields)-1], "...") {
		return nil
	}
	if cmd.path == "completion" {
		return []string{"bash", "fish", "zsh"}
	}
	kind := ""
	switch {
	case arg == "QUEUE":
		kind = "queue"
	case arg == "TOPIC":
		kind = "topic"
	case arg == "SAGA":
		kind = "saga"
	case arg == "NAME" && strings.HasPrefix(cmd.path, "schedules "):
		kind = "schedule"
	default:
		return nil
	}
	ctx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
	defer cancel()
	env, err := connect(ctx, c.o, c.rc)
	if err != nil {
		return nil
	}
	defer env.close()
	var out []string
	switch kind {
	case "queue":
		qs, _ := env.listQueues(ctx)
		for _, q := range qs {
			out = append(out, q.Name)
		}
	case "topic":
		out, _ = env.listTopicNames(ctx)
	case "saga":
		ts, _ := env.sagaTypes(ctx)
		for _, t := range ts {
			out = append(out, t.Saga)
		}
	case "schedule":
		c.env, c.ctx = env, ctx
		if s, err := c.scheduler(); err == nil {
			for info, err := range s.List(ctx) {
				if err != nil {
					break
				}
				out = append(out, info.Name)
			}
		}
	}
	slices.Sort(out)
	return out
}
