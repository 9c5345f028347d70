package sagatest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/sagatest"
)

// The TwoFactor saga of the saga package's documentation, which the
// example in this package's documentation tests. (Run needs a *testing.T,
// so the example is a test, not an Example function.)

type (
	OTP struct {
		Code     string
		Attempts int
	}
	CodeRequested struct{ User, Code string }
	Expired       struct{}
	CodeExpired   struct{ User string }
)

var TwoFactor = saga.Define[OTP]("twofactor")

func init() {
	saga.StartedBy(TwoFactor, saga.By(func(m CodeRequested) string { return m.User }),
		func(ctx context.Context, c *saga.Context[OTP], m CodeRequested) error {
			c.Data.Code = m.Code
			_, err := c.RequestTimeout(5*time.Minute, Expired{})
			return err
		})
	saga.OnTimeout(TwoFactor, func(ctx context.Context, c *saga.Context[OTP], _ Expired) error {
		c.MarkComplete()
		return c.Send("notifications", CodeExpired{User: c.ID()})
	})
}

func TestCodeExpires(t *testing.T) {
	sagatest.Run(t, []saga.Saga{TwoFactor}, func(t *testing.T, env *sagatest.Env) {
		env.Send(CodeRequested{User: "ann", Code: "123456"})
		env.Advance(5*time.Minute - time.Second)
		sagatest.AssertState(t, env, TwoFactor, "ann", OTP{Code: "123456"})

		env.Advance(time.Second) // virtual: returns at once
		env.AssertCompleted(t, TwoFactor, "ann")
		env.AssertSent(t, "notifications", CodeExpired{User: "ann"})

		// The journal the package documentation shows.
		want := `+0s        test sent sagatest_test.CodeRequested {"User":"ann","Code":"123456"}
+0s        twofactor/ann: sagatest_test.CodeRequested handled, started
+0s          state {"Code":"123456","Attempts":0}
+0s          timeout sagatest_test.Expired requested, due +5m0s
+5m0s      twofactor/ann: timeout sagatest_test.Expired handled, completed
+5m0s        sent sagatest_test.CodeExpired to notifications {"User":"ann"}
`
		if got := env.Journal(); got != want {
			t.Errorf("journal:\n%s\nwant:\n%s", got, strings.TrimSpace(want))
		}
	})
}
