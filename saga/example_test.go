package saga_test

import (
	"context"
	"fmt"
	"go/format"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/sagatest"
	"github.com/jetsaga/jetsaga/transport"
)

// The canonical saga of the documentation (README.md quotes it from here,
// between the markers): a 2FA code that expires after 5 minutes.

// README: saga begin
type OTP struct {
	Code     string
	Attempts int
}

type (
	CodeRequested struct{ Login, User string }
	CodeEntered   struct{ Login, Code string }
	SendCode      struct{ User, Code string }
	Verified      struct{ Login string }
	Expired       struct{ Login string }
	codeExpired   struct{} // the timeout's payload
)

// A timeout waits for weeks under its payload's name: a stable one survives
// renaming the type or moving the package (saga.Named; any message may).
func (codeExpired) MessageName() string { return "twofactor.CodeExpired" }

var TwoFactor = saga.Define[OTP]("twofactor")

func init() {
	saga.StartedBy(TwoFactor, saga.By(func(m CodeRequested) string { return m.Login }),
		func(ctx context.Context, c *saga.Context[OTP], m CodeRequested) error {
			c.Data.Code = newCode()
			if _, err := c.RequestTimeout(5*time.Minute, codeExpired{}); err != nil {
				return err
			}
			return c.Send("sms", SendCode{User: m.User, Code: c.Data.Code})
		})
	saga.Handles(TwoFactor, saga.By(func(m CodeEntered) string { return m.Login }),
		func(ctx context.Context, c *saga.Context[OTP], m CodeEntered) error {
			if m.Code == c.Data.Code {
				c.MarkComplete() // also cancels the pending timeout
				return c.Send("auth-events", Verified{Login: c.ID()})
			}
			c.Data.Attempts++
			return nil
		})
	saga.OnTimeout(TwoFactor, func(ctx context.Context, c *saga.Context[OTP], _ codeExpired) error {
		c.MarkComplete()
		return c.Send("auth-events", Expired{Login: c.ID()})
	})
}

// README: saga end

// newCode makes a code: a fixed one here, so that the examples' output is
// fixed; a random one in examples/twofactor.
func newCode() string { return "123456" }

// The TwoFactor saga, run by a dispatcher on the in-memory transport and
// store: a production service passes transport.NewJetStream and kvstore
// instead. The user's service sends commands with Dispatcher.Send and
// reads what the saga sends, decoded with saga.Decode.
func Example() {
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	broker, err := transport.NewMemory()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer broker.Close()
	d, err := saga.NewDispatcher(broker, memstore.New(), "auth", saga.WithSagas(TwoFactor))
	if err != nil {
		fmt.Println(err)
		return
	}
	run, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Run(run) }()

	d.Send(ctx, CodeRequested{Login: "l1", User: "ann"})
	sms, _ := broker.Queue(ctx, "sms")
	ds, err := sms.Receive(ctx, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	code, _ := saga.Decode[SendCode](ds[0].Message)
	ds[0].Complete(ctx)
	fmt.Printf("sms to %s: %s\n", code.User, code.Code)

	d.Send(ctx, CodeEntered{Login: "l1", Code: code.Code})
	events, _ := broker.Queue(ctx, "auth-events")
	ds, err = events.Receive(ctx, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	v, err := saga.Decode[Verified](ds[0].Message)
	ds[0].Complete(ctx)
	fmt.Printf("verified: %s %v\n", v.Login, err)

	cancel()
	<-done
	// Output:
	// sms to ann: 123456
	// verified: l1 <nil>
}

// README: test begin
func TestCodeExpires(t *testing.T) {
	sagatest.Run(t, []saga.Saga{TwoFactor}, func(t *testing.T, env *sagatest.Env) {
		env.Send(CodeRequested{Login: "l1", User: "ann"})
		env.Advance(5*time.Minute - time.Nanosecond)
		env.AssertRunning(t, TwoFactor, "l1")

		env.Advance(time.Nanosecond) // virtual: returns at once
		env.AssertCompleted(t, TwoFactor, "l1")
		env.AssertSent(t, "auth-events", Expired{Login: "l1"})
	})
}

// README: test end

type SignedUp struct{ Email string }
type Confirmed struct{ Email string }
type lapse struct{}
type Released struct{ Email string }

// A sign-up saga on the in-memory transport: a timeout releases the
// account unless it is confirmed first. Tests use sagatest's virtual
// clock instead of the short real timeout here.
func Example_signUp() {
	signup := saga.Define[struct{ Confirmed bool }]("signup")
	saga.StartedBy(signup, saga.By(func(m SignedUp) string { return m.Email }),
		func(ctx context.Context, c *saga.Context[struct{ Confirmed bool }], m SignedUp) error {
			_, err := c.RequestTimeout(50*time.Millisecond, lapse{})
			return err
		})
	saga.Handles(signup, saga.By(func(m Confirmed) string { return m.Email }),
		func(ctx context.Context, c *saga.Context[struct{ Confirmed bool }], m Confirmed) error {
			c.Data.Confirmed = true
			c.MarkComplete() // cancels the pending timeout
			return nil
		})
	saga.OnTimeout(signup, func(ctx context.Context, c *saga.Context[struct{ Confirmed bool }], _ lapse) error {
		c.MarkComplete()
		return c.Send("accounts", Released{Email: c.ID()})
	})

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	broker, _ := transport.NewMemory()
	// One step at a time, in queue order, so the example's output is fixed;
	// with more, Confirmed could overtake SignedUp.
	d, err := saga.NewDispatcher(broker, memstore.New(), "signups", saga.WithSagas(signup), saga.WithConcurrency(1))
	if err != nil {
		fmt.Println(err)
		return
	}
	// Sent before the dispatcher runs: ann's Confirmed is in the queue
	// before her SignedUp is handled, and so ahead of her timeout, which
	// that step schedules. However slow the machine, she confirms in time.
	d.Send(ctx, SignedUp{Email: "ann@example.com"})
	d.Send(ctx, SignedUp{Email: "bob@example.com"})
	d.Send(ctx, Confirmed{Email: "ann@example.com"})

	done := make(chan error)
	go func() { done <- d.Run(ctx) }()

	accounts, _ := broker.Queue(ctx, "accounts")
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ds, err := accounts.Receive(rctx, 10)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, del := range ds {
		r, err := saga.Decode[Released](del.Message)
		fmt.Println(r.Email, err)
		del.Complete(ctx)
	}
	stop()
	<-done
	// Output:
	// bob@example.com <nil>
}

// TestReadmeQuotesTheExample keeps README.md's saga and test snippets
// what this file compiles, and every Go snippet of the README
// gofmt-clean.
func TestReadmeQuotesTheExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{"saga", "test"} {
		_, rest, _ := strings.Cut(string(self), "// README: "+part+" begin\n")
		snippet, _, ok := strings.Cut(rest, "\n// README: "+part+" end")
		if !ok {
			t.Fatalf("no README markers for %s", part)
		}
		if !strings.Contains(string(readme), "```go\n"+snippet+"```\n") {
			t.Errorf("README.md does not quote the %s snippet of example_test.go verbatim:\n%s", part, snippet)
		}
	}
	blocks := strings.Split(string(readme), "```go\n")
	for _, b := range blocks[1:] {
		code, _, _ := strings.Cut(b, "```\n")
		formatted, err := format.Source([]byte(code))
		if err != nil {
			t.Errorf("README.md Go snippet does not parse: %v\n%s", err, code)
			continue
		}
		if string(formatted) != code {
			t.Errorf("README.md Go snippet is not gofmt-clean:\n%s\ngofmt:\n%s", code, formatted)
		}
	}
}
