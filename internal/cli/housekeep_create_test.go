package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// jetsaga housekeep QUEUE creates a queue that does not exist, with the
// default settings, as docs/wire.md and docs/operating.md say: the way
// to create a queue that only services in other languages use.
func TestHousekeepCreatesMissingQueue(t *testing.T) {
	srv := testutil.StartServer(t, embedded.Options{})
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"--server", srv.ClientURL(), "housekeep", "fresh"}, strings.NewReader(""), pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil || line != "looking after queue fresh\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	go io.Copy(io.Discard, pr)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), "JETSAGA_Q_fresh_0")
	if err != nil {
		t.Fatalf("queue fresh after jetsaga housekeep fresh: %v", err)
	}
	var cfg transport.QueueConfig
	if err := json.Unmarshal([]byte(s.CachedInfo().Config.Metadata[transport.MetaConfig]), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Partitions != 1 || cfg.RequiresSession {
		t.Errorf("queue created with %+v, want the defaults (one partition, no sessions)", cfg)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("housekeep exit %d", code)
	}
}
