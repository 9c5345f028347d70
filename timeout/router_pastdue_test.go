package timeout_test

import (
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// TestRouterPastDue: a route with Beyond 0 takes any delay, also a
// timeout already due when it is scheduled — as a dispatcher schedules
// one whose step committed just before a slow effect ran — and a route
// with a positive Beyond takes none.
func TestRouterPastDue(t *testing.T) {
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	now := time.Now().Add(time.Hour).Truncate(time.Second)
	r := &timeout.Router{
		Default: timeout.NewQueue(b),
		Routes: []timeout.Route{
			{Sagas: []string{"Loan"}, Engine: "loan", Scheduler: timeout.NewQueue(b, timeout.WithEngineName("loan"))},
			{Beyond: time.Hour, Engine: "long", Scheduler: timeout.NewQueue(b, timeout.WithEngineName("long"))},
		},
		Now: func() time.Time { return now },
	}
	for _, tc := range []struct {
		name, saga, want string
	}{
		{"past due, route for any delay", "Loan", "loan"},
		{"past due, route beyond an hour", "Other", "queue"},
	} {
		ref, err := r.Schedule(t.Context(), timeout.Timeout{
			ID: tc.name, Queue: "q", At: now.Add(-time.Minute), Saga: tc.saga,
			Message: &transport.Message{Body: []byte(tc.name)},
		})
		if err != nil {
			t.Fatalf("%s: Schedule: %v", tc.name, err)
		}
		if ref.Engine() != tc.want {
			t.Errorf("%s: scheduled on %q, want %q", tc.name, ref.Engine(), tc.want)
		}
	}
}
