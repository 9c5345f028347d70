package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// TestBinary builds jetsaga and runs it against an embedded server, the
// way an operator does: NATS_URL from the environment, JSON out, exit
// codes, and the refusal of a destructive command without a terminal.
func TestBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "jetsaga")
	goBin, err := exec.LookPath("go") // go test puts its own go first on PATH
	if err != nil {
		t.Fatal(err)
	}
	build := exec.Command(goBin, "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	srv, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	broker, err := transport.NewJetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	ctx := context.Background()
	q, err := broker.OpenQueue(ctx, transport.QueueConfig{Name: "mail"})
	if err != nil {
		t.Fatal(err)
	}
	seq, err := q.Schedule(ctx, &transport.Message{Body: []byte("hello")}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}

	run := func(args ...string) ([]byte, int) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "NATS_URL="+srv.ClientURL())
		out, err := cmd.Output() // stdin: /dev/null, not a terminal
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return out, exit.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return out, 0
	}
	out, code := run("queues", "list", "--json")
	var qs []struct {
		Name      string `json:"name"`
		Scheduled int    `json:"scheduled"`
	}
	if code != 0 || json.Unmarshal(out, &qs) != nil || len(qs) != 1 || qs[0].Name != "mail" || qs[0].Scheduled != 1 {
		t.Fatalf("queues list: exit %d\n%s", code, out)
	}
	s := strconv.FormatUint(seq, 10)
	if _, code := run("scheduled", "cancel", "mail", s); code != 5 {
		t.Fatalf("cancel without --yes and without a terminal: exit %d, want 5", code)
	}
	if out, code := run("scheduled", "cancel", "mail", s, "--yes"); code != 0 {
		t.Fatalf("cancel --yes: exit %d\n%s", code, out)
	}
	if _, code := run("scheduled", "cancel", "mail", s, "--yes"); code != 3 {
		t.Fatalf("cancel again: exit %d, want 3", code)
	}
	if _, code := run("nosuch"); code != 2 {
		t.Fatalf("unknown command: exit %d, want 2", code)
	}

	// bash completion, as a user loads it: a command, a subcommand, a
	// flag and a queue name from the server complete.
	script, code := run("completion", "bash")
	if code != 0 {
		t.Fatalf("completion bash: exit %d", code)
	}
	scriptFile := filepath.Join(t.TempDir(), "jetsaga.bash")
	if err := os.WriteFile(scriptFile, script, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ line, want string }{
		{"jetsaga que", "queues"},
		{"jetsaga queues br", "browse"},
		{"jetsaga queues browse --sta", "--state"},
		{"jetsaga queues show ma", "mail"},
	} {
		words := strings.Fields(tc.line)
		if strings.HasSuffix(tc.line, " ") {
			words = append(words, "")
		}
		sh := exec.Command("bash", "-c", `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($#-1)); _jetsaga; printf '%s
' "${COMPREPLY[@]}"`, "bash", scriptFile)
		sh.Args = append(sh.Args, words...)
		sh.Env = append(os.Environ(), "NATS_URL="+srv.ClientURL(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := sh.Output()
		if err != nil {
			t.Fatalf("bash completion of %q: %v", tc.line, err)
		}
		if got := strings.Fields(string(out)); !slices.Contains(got, tc.want) {
			t.Errorf("bash completion of %q: %q, want %q among them", tc.line, got, tc.want)
		}
	}
	pathEnv := "PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH")

	// zsh, as a user has it: an interactive zsh (on a pseudo-terminal,
	// zsh/zpty) with compinit and the script loaded, typing the line and
	// a tab; the line the shell shows afterwards must be completed.
	script, code = run("completion", "zsh")
	if code != 0 {
		t.Fatalf("completion zsh: exit %d", code)
	}
	zdir := t.TempDir()
	if err := os.WriteFile(filepath.Join(zdir, "_jetsaga"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	const typeTab = `zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z "PS1='> '; autoload -U compinit; compinit -u -D; fpath=($1 \$fpath); source $1/_jetsaga"
zpty -w -n z "$2"$'\t'
zpty -r z out "*$3*" && print -r -- "$3"`
	for _, tc := range []struct{ line, want string }{
		{"jetsaga queues br", "jetsaga queues browse"},
		{"jetsaga queues show ma", "jetsaga queues show mail"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		sh := exec.CommandContext(ctx, "zsh", "-f", "-c", typeTab, "zsh", zdir, tc.line, tc.want)
		sh.Env = append(os.Environ(), "NATS_URL="+srv.ClientURL(), pathEnv)
		out, err := sh.Output()
		cancel()
		if err != nil || strings.TrimSpace(string(out)) != tc.want {
			t.Errorf("zsh completion of %q: %v, %q; want the line to become %q", tc.line, err, out, tc.want)
		}
	}

	// fish: its own completion engine (complete -C) with the script loaded.
	script, code = run("completion", "fish")
	if code != 0 {
		t.Fatalf("completion fish: exit %d", code)
	}
	fishFile := filepath.Join(t.TempDir(), "jetsaga.fish")
	if err := os.WriteFile(fishFile, script, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ line, want string }{
		{"jetsaga que", "queues"},
		{"jetsaga queues browse --sta", "--state"},
		{"jetsaga queues show ma", "mail"},
	} {
		sh := exec.Command("fish", "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, fishFile, tc.line)
		sh.Env = append(os.Environ(), "NATS_URL="+srv.ClientURL(), pathEnv)
		out, err := sh.Output()
		if got := strings.Fields(string(out)); err != nil || !slices.Contains(got, tc.want) {
			t.Errorf("fish completion of %q: %v, %q; want %q among them", tc.line, err, got, tc.want)
		}
	}
}
