package embedded_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// A stream whose store cannot be created fails with JetStream's generic
// "error creating store for stream" (10049); the server says why only in
// its log, which Options.Logger receives.
func TestLoggerGetsWarnings(t *testing.T) {
	var logs testutil.Buffer
	srv, err := embedded.Start(embedded.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	// A file where the stream's directory would go.
	streams := filepath.Join(srv.StoreDir(), "jetstream", "$G", "streams")
	if err := os.MkdirAll(streams, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(streams, "BLOCKED"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "BLOCKED", Subjects: []string{"blocked"}})
	if apiErr, ok := errors.AsType[*jetstream.APIError](err); !ok || apiErr.ErrorCode != 10049 {
		t.Fatalf("creating a stream over a file: %v, want error 10049", err)
	}
	if got := logs.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "nats-server: Stream create failed") || !strings.Contains(got, "BLOCKED") {
		t.Errorf("the logger got:\n%s\nwant the server's warning of the failed stream", got)
	}
}
