package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
)

type refundAsked struct{ Order string }

// A call whose outcome its AtMostOnce policy leaves in doubt (the
// provider timed out) is listed by jetsaga sagas calls, with the key the
// provider got, and the command exits 7; a call of a committed step is not.
func TestSagasCalls(t *testing.T) {
	w := newWorkload(t)
	keys := make(chan string, 10)
	def := saga.Define[struct{}]("refund")
	saga.StartedBy(def, saga.By(func(m refundAsked) string { return m.Order }),
		func(ctx context.Context, c *saga.Context[struct{}], m refundAsked) error {
			_, err := saga.Call(ctx, c, "refund", func(_ context.Context, key string) (int, error) {
				keys <- key
				if m.Order == "ok" {
					return 1, nil
				}
				return 0, errors.New("payments API: timeout") // the refund may or may not be made
			}, saga.AtMostOnce())
			return err
		})
	d := w.dispatcher("refunds", saga.WithSagas(def),
		saga.WithRetry(saga.RetryPolicy{Immediate: 1, Delayed: 1, Backoff: func(int) time.Duration { return 10 * time.Millisecond }}))
	sendAll(t, d, refundAsked{"ok"}, refundAsked{"r1"})
	testutil.Await(t, 10*time.Second, func() string {
		n := 0
		for _, err := range d.CallsInDoubt(t.Context(), 0) {
			if err != nil {
				return err.Error()
			}
			n++
		}
		if n != 1 || len(keys) != 2 {
			return fmt.Sprintf("%d calls in doubt, %d calls made; want 1 and 2", n, len(keys))
		}
		return ""
	})
	vs := jsonOf[[]saga.CallInDoubt](w, ExitStuck, "sagas", "calls", "0s")
	if len(vs) != 1 || vs[0].Saga != "refund" || vs[0].ID != "r1" || vs[0].Name != "refund" || vs[0].Key == "" {
		t.Errorf("sagas calls --json: %+v; want refund/r1's call", vs)
	}
	if r := w.must(ExitStuck, "sagas", "calls", "0s"); !strings.Contains(r.stdout, vs[0].Key) || !strings.Contains(r.stdout, "1 call(s) in doubt") {
		t.Errorf("sagas calls:\n%s", r.stdout)
	}
	if r := w.must(0, "sagas", "calls", "1h"); !strings.Contains(r.stdout, "0 call(s) in doubt") {
		t.Errorf("sagas calls 1h: a call recorded moments ago listed:\n%s", r.stdout)
	}
	if r := w.run("sagas", "calls", "soon"); r.code != ExitUsage {
		t.Errorf("sagas calls soon: exit %d, want %d", r.code, ExitUsage)
	}
}
