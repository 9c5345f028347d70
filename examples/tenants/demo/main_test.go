package main

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/jetsaga/jetsaga/examples/tenants"
	"github.com/jetsaga/jetsaga/internal/testutil"
)

// TestDemo plays a smaller burst (1,500 of the noisy tenant's reminders,
// three of each of ten quiet tenants, all due at one instant) on both
// layouts: every reminder e-mail is sent once, and the demo reports each
// layout. How late the quiet tenants are is a benchmark's question, not a
// test's (cmd/jetsaga-bench -only noisy); the demo prints it.
func TestDemo(t *testing.T) {
	const noisy, quiet, each = 1500, 10, 3
	var out testutil.Buffer
	outs, err := run(t.Context(), &out, options{Noisy: noisy, Quiet: quiet, Each: each, Fair: tenants.Fair,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if len(outs) != 2 {
		t.Fatalf("%d layouts played, want 2", len(outs))
	}
	for _, r := range outs {
		if r.Twice != 0 || len(r.Late[noisyTenant]) != noisy {
			t.Errorf("layout %+v: %d noisy e-mails, %d twice; want %d, none twice", r.Layout, len(r.Late[noisyTenant]), r.Twice, noisy)
		}
		for q := range quiet {
			if n := len(r.Late[quietTenant(q)]); n != each {
				t.Errorf("layout %+v: %s got %d e-mails, want %d", r.Layout, quietTenant(q), n, each)
			}
		}
	}
	for _, want := range []string{"default layout (1 partition): noisy's burst drained", "fair layout (11 partitions by tenant, 4 steps of a tenant at once)", "quiet-00"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
