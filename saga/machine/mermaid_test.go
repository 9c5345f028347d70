package machine_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
)

// mermaidDir holds the Node.js program that parses diagrams with Mermaid
// (package.json pins mermaid and jsdom; npm ci installs them).
const mermaidDir = "testdata/mermaid"

// oddName's message name holds what could break a diagram: a quote that
// would end its label, an arrow, a comment, an entity code and markup.
type oddName struct{ ID string }

func (oddName) MessageName() string { return "odd\"] --> start\n%% #quot; <b>`x`" }

// TestDiagramsParse parses with Mermaid 11 every golden diagram of the
// repository — the machines' (Machine.Mermaid) and the plain sagas'
// (saga.Definition.Mermaid) — and a plain saga's whose message name is
// made to break it: each is a diagram Mermaid reads, of the kind it
// claims to be.
func TestDiagramsParse(t *testing.T) {
	files, err := filepath.Glob("testdata/*.mmd")
	if err != nil {
		t.Fatal(err)
	}
	examples, err := filepath.Glob("../../examples/*/testdata/*.mmd")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, examples...)
	d := saga.Define[struct{}]("odd")
	saga.StartedBy(d, saga.By(func(m oddName) string { return m.ID }),
		func(context.Context, *saga.Context[struct{}], oddName) error { return nil })
	odd := filepath.Join(t.TempDir(), "odd.mmd")
	if err := os.WriteFile(odd, []byte(d.Mermaid()), 0o644); err != nil {
		t.Fatal(err)
	}
	files = append(files, odd)
	// The goldens known today: machines order and door, ordermachine's,
	// twofactor's and emailconfirm's; a glob that found fewer checked
	// less than it says.
	if len(files) < 6 {
		t.Fatalf("found %d diagrams (%v), want at least 6", len(files), files)
	}

	npmCI(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	abs := make([]string, len(files))
	for i, f := range files {
		if abs[i], err = filepath.Abs(f); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(ctx, "node", append([]string{"parse.mjs"}, abs...)...)
	cmd.Dir = mermaidDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node parse.mjs: %v\n%s", err, stderr.String())
	}
	parsed := make(map[string]bool)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r struct{ File, Type, Error string }
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("parse.mjs printed %q: %v", sc.Text(), err)
		}
		text, err := os.ReadFile(r.File)
		if err != nil {
			t.Fatal(err)
		}
		want := "stateDiagram"
		if strings.HasPrefix(string(text), "flowchart") {
			want = "flowchart-v2"
		}
		switch {
		case r.Error != "":
			t.Errorf("%s: Mermaid does not parse it: %s\n%s", r.File, r.Error, text)
		case r.Type != want:
			t.Errorf("%s: Mermaid reads a %q, want a %q", r.File, r.Type, want)
		}
		parsed[r.File] = true
	}
	for _, f := range abs {
		if !parsed[f] {
			t.Errorf("%s: parse.mjs said nothing of it", f)
		}
	}
	t.Logf("%d diagrams parsed", len(parsed))
}

// npmCI installs the parser's packages as package-lock.json pins them,
// unless node_modules is as new as the lock file.
func npmCI(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: the Mermaid check needs node and npm (make test installs them as root: apt-get install -y nodejs npm)", tool)
		}
	}
	lock, err := os.Stat(filepath.Join(mermaidDir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	mods, err := os.Stat(filepath.Join(mermaidDir, "node_modules", ".package-lock.json"))
	if err == nil && !mods.ModTime().Before(lock.ModTime()) {
		return
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = mermaidDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in saga/machine/%s (mermaid and jsdom from the npm registry, as package-lock.json pins them): %v\n%s", mermaidDir, err, out)
	}
}
