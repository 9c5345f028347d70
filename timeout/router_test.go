package timeout_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// TestRouterPicks checks which engine the router picks, by delay, saga
// type and the engine a timeout asks for, and that Cancel and Pending
// reach the engine that holds each timeout.
func TestRouterPicks(t *testing.T) {
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// The router's clock; the broker's is the real one, which must not
	// reach the due times during the test.
	now := time.Now().Add(time.Hour).Truncate(time.Second)
	r := &timeout.Router{
		Default: timeout.NewQueue(b),
		Routes: []timeout.Route{
			{Beyond: 24 * time.Hour, Engine: "long", Scheduler: timeout.NewQueue(b, timeout.WithEngineName("long"))},
			{Sagas: []string{"Loan"}, Engine: "loan", Scheduler: timeout.NewQueue(b, timeout.WithEngineName("loan"))},
			{Beyond: time.Hour, Sagas: []string{"Claim"}, Engine: "claims", Scheduler: timeout.NewQueue(b, timeout.WithEngineName("claims"))},
		},
		Now: func() time.Time { return now },
	}
	for _, tc := range []struct {
		name   string
		after  time.Duration
		saga   string
		engine string
		want   string
	}{
		{"short", time.Minute, "", "", "queue"},
		{"long", 48 * time.Hour, "", "", "long"},
		{"exactly beyond", 24 * time.Hour, "Other", "", "long"},
		{"named saga, short", time.Minute, "Loan", "", "loan"},
		{"named saga beats a longer generic route", 30 * 24 * time.Hour, "Loan", "", "loan"},
		{"named saga, below its Beyond", time.Minute, "Claim", "", "queue"},
		{"named saga, above its Beyond", 2 * time.Hour, "Claim", "", "claims"},
		{"asked for", 48 * time.Hour, "Loan", "queue", "queue"},
	} {
		ref, err := r.Schedule(t.Context(), timeout.Timeout{
			ID: tc.name, Queue: "q", At: now.Add(tc.after), Saga: tc.saga, Engine: tc.engine,
			Message: &transport.Message{Body: []byte(tc.name)},
		})
		if err != nil {
			t.Fatalf("%s: Schedule: %v", tc.name, err)
		}
		if ref.Engine() != tc.want {
			t.Errorf("%s: scheduled on %q, want %q", tc.name, ref.Engine(), tc.want)
		}
	}
	if _, err := r.Schedule(t.Context(), timeout.Timeout{ID: "x", Queue: "q", At: now, Engine: "temporal", Message: &transport.Message{}}); !errors.Is(err, timeout.ErrInvalidTimeout) {
		t.Errorf("Schedule asking for a missing engine: %v, want ErrInvalidTimeout", err)
	}

	got := map[string]string{}
	for p, err := range r.Pending(t.Context(), timeout.Filter{Queue: "q"}) {
		if err != nil {
			t.Fatalf("Pending: %v", err)
		}
		if _, dup := got[p.ID]; dup {
			t.Errorf("Pending: %s listed twice", p.ID)
		}
		got[p.ID] = p.Ref.Engine()
		if p.ID == "named saga, short" {
			if err := r.Cancel(t.Context(), p.Ref); err != nil {
				t.Errorf("Cancel(%s): %v", p.Ref, err)
			}
		}
	}
	if len(got) != 8 || got["long"] != "long" || got["short"] != "queue" || got["named saga, above its Beyond"] != "claims" {
		t.Errorf("Pending listed %v", got)
	}
	// Loan's pending timeouts, each once, across two engines; its first,
	// cancelled above, is not among them.
	loan := map[string]int{}
	for p, err := range r.Pending(t.Context(), timeout.Filter{Queue: "q", Saga: "Loan"}) {
		if err != nil {
			t.Fatalf("Pending: %v", err)
		}
		loan[p.ID]++
	}
	if len(loan) != 2 || loan["named saga beats a longer generic route"] != 1 || loan["asked for"] != 1 {
		t.Errorf("Pending(Saga: Loan) listed %v, want each of Loan's two pending timeouts once", loan)
	}
	if err := r.Cancel(t.Context(), "nowhere:q:1@2"); !errors.Is(err, timeout.ErrInvalidRef) {
		t.Errorf("Cancel on a missing engine: %v, want ErrInvalidRef", err)
	}
	if got := r.Engines(); len(got) != 4 || got[0] != "queue" {
		t.Errorf("Engines() = %v", got)
	}
}

// TestListWithoutLister checks that a scheduler that cannot list says so
// with an error that matches errors.ErrUnsupported.
func TestListWithoutLister(t *testing.T) {
	// Each listing yields exactly one item, the error: one that yields
	// nothing, or a timeout, fails.
	var errs []error
	for _, err := range timeout.List(t.Context(), noList{}, timeout.Filter{}) {
		errs = append(errs, err)
	}
	if len(errs) != 1 || !errors.Is(errs[0], timeout.ErrNoListing) || !errors.Is(errs[0], errors.ErrUnsupported) {
		t.Errorf("List yielded errors %v, want one ErrNoListing matching errors.ErrUnsupported", errs)
	}
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	errs = nil
	for _, err := range timeout.NewQueue(b).Pending(t.Context(), timeout.Filter{}) {
		errs = append(errs, err)
	}
	if len(errs) != 1 || !errors.Is(errs[0], timeout.ErrNoListing) {
		t.Errorf("Queue.Pending without a queue yielded errors %v, want one ErrNoListing", errs)
	}
}

type noList struct{ timeout.Scheduler }
