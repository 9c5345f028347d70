package wiretest_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/internal/cli"
	"github.com/jetsaga/jetsaga/internal/wiretest"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// The tests in this file check that what docs/wire.md cites exists: each
// `jetsaga ...` command, each stream metadata key, each Go name of
// packages transport and saga, and the metadata that a topic's filter
// properties are read from. A client written from the document alone
// follows these names; one that names nothing real sends it astray.

// spans returns the text between backticks of every inline code span in
// the document at path, with its line, outside fenced blocks.
func spans(t *testing.T, path string) []span {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []span
	fenced := false
	for i, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range codeSpan.FindAllStringSubmatch(line, -1) {
			out = append(out, span{text: m[1], line: i + 1})
		}
	}
	return out
}

type span struct {
	text string
	line int
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// TestWireCommandsExist checks every `jetsaga ...` command that
// docs/wire.md cites against the command's own table: the words after
// "jetsaga" must begin with a command's path (a bare `jetsaga` names
// none), and the arguments the document gives must be a number the
// command takes. The old text's `jetsaga timeouts cancel` (no such
// command) and its bare `jetsaga` fail here.
func TestWireCommandsExist(t *testing.T) {
	n := 0
	for _, s := range spans(t, wireDoc) {
		words := strings.Fields(s.text)
		if len(words) == 0 || words[0] != "jetsaga" {
			continue
		}
		n++
		args := words[1:]
		if len(args) == 0 {
			t.Errorf("docs/wire.md line %d: `jetsaga` names no command: name the one meant", s.line)
			continue
		}
		var stdout, stderr bytes.Buffer
		code := cli.Run(t.Context(), append(slices.Clone(args), "--help"), strings.NewReader(""), &stdout, &stderr)
		m := usageLine.FindStringSubmatch(stdout.String())
		if code != cli.ExitOK || m == nil || !slices.Equal(strings.Fields(m[1]), args[:min(len(args), len(strings.Fields(m[1])))]) {
			t.Errorf("docs/wire.md line %d: `%s` is no jetsaga command (exit %d): %s", s.line, s.text, code, strings.TrimSpace(stderr.String()))
			continue
		}
		// The argument count is checked before the command connects: a
		// server that is not there makes any other command line fail
		// with a connection error, not a usage error.
		stdout.Reset()
		stderr.Reset()
		code = cli.Run(t.Context(), append([]string{"--server", "nats://127.0.0.1:1", "--timeout", "1s"}, args...), strings.NewReader(""), &stdout, &stderr)
		if code == cli.ExitUsage {
			t.Errorf("docs/wire.md line %d: `%s`: %s", s.line, s.text, strings.TrimSpace(stderr.String()))
		}
	}
	if n == 0 {
		t.Fatal("docs/wire.md cites no jetsaga command: the parse went wrong")
	}
}

var usageLine = regexp.MustCompile(`^Usage: jetsaga ([a-z-]+(?: [a-z-]+)*) \[flags\]`)

// metaKeys are the stream metadata keys package transport exports.
var metaKeys = map[string]bool{
	transport.MetaPartitions:      true,
	transport.MetaRequiresSession: true,
	transport.MetaConfig:          true,
	transport.MetaTopic:           true,
}

// TestWireMetadataKeysExist checks every stream metadata key docs/wire.md
// cites (a span `jetsaga.<name>`) against the keys package transport
// exports.
func TestWireMetadataKeysExist(t *testing.T) {
	n := 0
	for _, s := range spans(t, wireDoc) {
		if !metaKey.MatchString(s.text) {
			continue
		}
		n++
		if !metaKeys[s.text] {
			t.Errorf("docs/wire.md line %d: `%s` is no stream metadata key of package transport", s.line, s.text)
		}
	}
	if n == 0 {
		t.Fatal("docs/wire.md cites no metadata key: the parse went wrong")
	}
}

var metaKey = regexp.MustCompile(`^jetsaga\.[a-z_]+$`)

// notGo are the capitalised names docs/wire.md cites that are no Go
// names of jetsaga's, and why.
var notGo = map[string]string{
	"AckWait": "the receive consumer's setting (nats-server's ConsumerConfig)",
	"BigInt":  "JavaScript's",
}

// TestWireGoNamesExist checks every Go name of package transport or saga
// that docs/wire.md cites (`Broker.OpenQueue`, `transport.QueueConfig`,
// `FilterProperties`, `saga.TypeProperty`, ...) against the packages'
// source: a type, function, constant or variable, Type.Method or
// Type.Field, or alone a field's or method's name. Values of the Names
// table (`MalformedMessage`) are not names.
func TestWireGoNamesExist(t *testing.T) {
	doc, err := wiretest.ReadDoc(wireDoc)
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]bool{}
	for _, n := range doc.Names {
		values[n.Value] = true
	}
	pkgs := map[string]map[string]bool{
		"transport": goNames(t, "../../transport"),
		"saga":      goNames(t, "../../saga"),
	}
	n := 0
	for _, s := range spans(t, wireDoc) {
		if !goName.MatchString(s.text) || values[s.text] || notGo[s.text] != "" {
			continue
		}
		n++
		pkg, name := "transport", s.text
		if p, rest, ok := strings.Cut(s.text, "."); ok && (p == "transport" || p == "saga") {
			pkg, name = p, rest
		}
		if !pkgs[pkg][name] {
			t.Errorf("docs/wire.md line %d: `%s` is no name of package %s", s.line, s.text, pkg)
		}
	}
	if n == 0 {
		t.Fatal("docs/wire.md cites no Go name: the parse went wrong")
	}
}

var goName = regexp.MustCompile(`^(?:transport\.|saga\.)?[A-Z][a-z][A-Za-z0-9]*(?:\.[A-Z][A-Za-z0-9]*)*$`)

// goNames returns the exported names declared in the non-test Go files
// of the package in dir: top-level names, Type.Method and Type.Field,
// and fields' and methods' names alone.
func goNames(t *testing.T, dir string) map[string]bool {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	names := map[string]bool{}
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					names[d.Name.Name] = true
					continue
				}
				recv := d.Recv.List[0].Type
				if st, ok := recv.(*ast.StarExpr); ok {
					recv = st.X
				}
				if id, ok := recv.(*ast.Ident); ok {
					names[id.Name+"."+d.Name.Name] = true
					names[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					switch sp := sp.(type) {
					case *ast.ValueSpec:
						for _, id := range sp.Names {
							names[id.Name] = true
						}
					case *ast.TypeSpec:
						names[sp.Name.Name] = true
						if st, ok := sp.Type.(*ast.StructType); ok {
							for _, fl := range st.Fields.List {
								for _, id := range fl.Names {
									names[sp.Name.Name+"."+id.Name] = true
									names[id.Name] = true
								}
							}
						}
					}
				}
			}
		}
	}
	if len(names) == 0 {
		t.Fatalf("no Go names in %s", dir)
	}
	return names
}

// topicMeta finds, in docs/wire.md's section "Sending to a topic", the
// metadata key and the stream a topic's FilterProperties are read from.
var topicMeta = regexp.MustCompile("order of `FilterProperties` in the JSON of the metadata key\\s+`([^`]+)` of stream `([^`]+)`")

// TestWireTopicFilterPropertiesMetadata reads a topic's FilterProperties
// where docs/wire.md says they are, on a real server: the old text
// ("in the topic's `jetsaga.config` metadata", which holds the topic's
// queue settings, without FilterProperties) fails here.
func TestWireTopicFilterPropertiesMetadata(t *testing.T) {
	b, err := os.ReadFile(wireDoc)
	if err != nil {
		t.Fatal(err)
	}
	m := topicMeta.FindStringSubmatch(string(b))
	if m == nil {
		t.Fatalf("docs/wire.md: Sending to a topic does not say, as %q, which metadata key of which stream holds a topic's FilterProperties", topicMeta)
	}
	key, stream := m[1], m[2]
	srv, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	br, err := transport.NewJetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { br.Close() })
	want := []string{"region", "tier"}
	if _, err := br.OpenTopic(t.Context(), transport.TopicConfig{Name: "events", FilterProperties: want}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// P_T_T_0: the prefix, the kind T, the topic's name T, the partition.
	parts := strings.Split(stream, "_")
	if len(parts) != 4 || parts[0] != "P" || parts[2] != "T" {
		t.Fatalf("docs/wire.md: stream %s is not of the form P_<kind>_T_<partition>", stream)
	}
	parts[0], parts[2] = transport.DefaultPrefix, "events"
	name := strings.Join(parts, "_")
	s, err := js.Stream(t.Context(), name)
	if err != nil {
		t.Fatalf("docs/wire.md names stream %s (%s for topic events): %v", stream, name, err)
	}
	var cfg struct {
		FilterProperties                 []string
		DuplicateWindow, CancelRecordTTL time.Duration
	}
	raw := s.CachedInfo().Config.Metadata[key]
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil || !slices.Equal(cfg.FilterProperties, want) {
		t.Fatalf("docs/wire.md: metadata %s of stream %s is %q: FilterProperties %q, want %q (err %v)", key, name, raw, cfg.FilterProperties, want, err)
	}

	// A send built as the section says reaches the subscription whose
	// filter it passes.
	if !strings.Contains(string(b), "P.TS.T.p.<k>.f.m.<subject>.<v1>...<vn>") {
		t.Fatal("docs/wire.md: Sending to a topic has no subject template P.TS.T.p.<k>.f.m.<subject>.<v1>...<vn>")
	}
	topic, err := br.Topic(t.Context(), "events")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := topic.OpenSubscription(t.Context(), "eu", transport.SubscriptionConfig{Filter: transport.Filter{Properties: map[string]string{"region": "eu"}}})
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256([]byte("topic-1"))
	k := "_" + base64.RawURLEncoding.EncodeToString(h[:16])
	tok := func(v string) string { return "_" + base64.RawURLEncoding.EncodeToString([]byte(v)) }
	values := map[string]string{"region": "eu"}      // no tier
	subject := "JETSAGA.TS.events.0." + k + ".f.m.-" // no Jetsaga-Subject
	for _, p := range cfg.FilterProperties {
		if v, ok := values[p]; ok {
			subject += "." + tok(v)
		} else {
			subject += ".-"
		}
	}
	msg := nats.NewMsg(subject)
	msg.Data = []byte("hello")
	msg.Header.Set(transport.HeaderMessageID, "topic-1")
	msg.Header.Set(transport.HeaderPropertyPrefix+"region", "eu")
	msg.Header.Set("Nats-Expected-Last-Subject-Sequence", "0")
	msg.Header.Set("Nats-Expected-Last-Subject-Sequence-Subject", "JETSAGA.TS.events.0."+k+".>")
	ttl := max(cfg.DuplicateWindow, cfg.CancelRecordTTL)
	msg.Header.Set("Nats-TTL", strconv.FormatInt(int64((ttl+time.Second-1)/time.Second), 10)+"s")
	if ttl <= 0 {
		t.Errorf("metadata %s has no DuplicateWindow or CancelRecordTTL for Nats-TTL: %s", key, raw)
	}
	if _, err := js.PublishMsg(t.Context(), msg); err != nil {
		t.Fatalf("topic send on %s as docs/wire.md says: %v", subject, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ds, err := sub.Receive(ctx, 1)
	if err != nil || len(ds) != 1 || ds[0].MessageID != "topic-1" || ds[0].Properties["region"] != "eu" {
		t.Fatalf("subscription eu received %v, %v; want the topic send", ds, err)
	}
}
