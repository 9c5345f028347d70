package twofactor

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"fmt"
	"math/big"
	"time"

	"github.com/jetsaga/jetsaga/saga"
)

// Messages the saga takes.
type (
	// CodeRequested starts a login's 2FA flow.
	CodeRequested struct{ Login, User string }
	// CodeResendRequested asks for a fresh code; the old one stops working.
	CodeResendRequested struct{ Login string }
	// CodeEntered is the user's attempt.
	CodeEntered struct{ Login, Code string }
	// expired is the timeout's payload.
	expired struct{}
)

// Messages the saga sends to the Events queue.
type (
	// CodeIssued carries the code to deliver to the user (by SMS, say).
	CodeIssued struct {
		Login, User, Code string
		ExpiresAt         time.Time
	}
	// CodeRejected says an attempt was wrong and how many remain.
	CodeRejected struct {
		Login     string
		Remaining int
	}
	// Verified says the login passed 2FA.
	Verified struct{ Login, User string }
	// Failed says the login failed 2FA, for Reason ReasonExpired or
	// ReasonTooManyAttempts.
	Failed struct{ Login, User, Reason string }
)

// Reasons a Failed message gives.
const (
	ReasonExpired         = "expired"
	ReasonTooManyAttempts = "too many attempts"
)

// Stable names, so that messages survive renaming the Go types.
func (CodeRequested) MessageName() string       { return "twofactor.CodeRequested" }
func (CodeResendRequested) MessageName() string { return "twofactor.CodeResendRequested" }
func (CodeEntered) MessageName() string         { return "twofactor.CodeEntered" }
func (expired) MessageName() string             { return "twofactor.Expired" }
func (CodeIssued) MessageName() string          { return "twofactor.CodeIssued" }
func (CodeRejected) MessageName() string        { return "twofactor.CodeRejected" }
func (Verified) MessageName() string            { return "twofactor.Verified" }
func (Failed) MessageName() string              { return "twofactor.Failed" }

// State is the saga's data for one login.
type State struct {
	User      string
	Code      string             // the code issued last; earlier ones no longer work
	Attempts  int                // wrong codes entered so far, across resends
	ExpiresAt time.Time          // when Code expires (UTC)
	Expiry    saga.TimeoutHandle // the pending expiry timeout, for a resend to cancel
}

// Config shapes the flow. The zero value is the 5-minute, 3-attempt flow.
type Config struct {
	// TTL is how long a code is valid. Default: 5m.
	TTL time.Duration
	// MaxAttempts is how many wrong codes end the flow. Default: 3.
	MaxAttempts int
	// Events is the queue the saga's messages go to. Default: "auth-events".
	Events string
	// NewCode makes a code. Default: 6 random digits.
	NewCode func() string
}

// New returns the 2FA saga definition, named "twofactor". Its instances
// are keyed by the Login of the messages: one flow per login attempt.
//
// A CodeRequested for a login whose flow is running changes nothing; after
// the flow completed it starts a new one. A code entered at or after its
// expiry fails the flow as expired, even if the expiry timeout, due at the
// same instant, has not been handled yet: the outcome does not depend on
// which of the two the dispatcher takes first. A resend keeps the attempts
// already used, so asking for new codes does not buy more guesses. A
// CodeEntered or CodeResendRequested for a login with no running flow
// (expired, failed, verified or never started) is dropped: the service
// already had the outcome from the events queue.
func New(cfg Config) *saga.Definition[State] {
	if cfg.TTL == 0 {
		cfg.TTL = 5 * time.Minute
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 3
	}
	if cfg.Events == "" {
		cfg.Events = "auth-events"
	}
	if cfg.NewCode == nil {
		cfg.NewCode = randomCode
	}
	issue := func(c *saga.Context[State]) error {
		c.Data.Code = cfg.NewCode()
		c.Data.ExpiresAt = c.Now().Add(cfg.TTL).UTC()
		h, err := c.RequestTimeout(cfg.TTL, expired{})
		if err != nil {
			return err
		}
		c.Data.Expiry = h
		return c.Send(cfg.Events, CodeIssued{Login: c.ID(), User: c.Data.User, Code: c.Data.Code, ExpiresAt: c.Data.ExpiresAt})
	}
	fail := func(c *saga.Context[State], reason string) error {
		c.MarkComplete()
		return c.Send(cfg.Events, Failed{Login: c.ID(), User: c.Data.User, Reason: reason})
	}

	d := saga.Define[State]("twofactor")
	saga.StartedBy(d, saga.By(func(m CodeRequested) string { return m.Login }),
		func(ctx context.Context, c *saga.Context[State], m CodeRequested) error {
			if !c.IsNew() {
				return nil // a repeated request for a running flow changes nothing
			}
			c.Data.User = m.User
			return issue(c)
		})
	saga.Handles(d, saga.By(func(m CodeResendRequested) string { return m.Login }),
		func(ctx context.Context, c *saga.Context[State], m CodeResendRequested) error {
			c.CancelTimeout(c.Data.Expiry) // the old code's timeout will never be handled
			return issue(c)
		})
	saga.Handles(d, saga.By(func(m CodeEntered) string { return m.Login }),
		func(ctx context.Context, c *saga.Context[State], m CodeEntered) error {
			if !c.Now().Before(c.Data.ExpiresAt) {
				// Entered when the code expired, before its timeout was
				// handled: expired all the same, whichever comes first.
				return fail(c, ReasonExpired)
			}
			if subtle.ConstantTimeCompare([]byte(m.Code), []byte(c.Data.Code)) == 1 {
				c.MarkComplete()
				return c.Send(cfg.Events, Verified{Login: c.ID(), User: c.Data.User})
			}
			c.Data.Attempts++
			if c.Data.Attempts >= cfg.MaxAttempts {
				return fail(c, ReasonTooManyAttempts)
			}
			return c.Send(cfg.Events, CodeRejected{Login: c.ID(), Remaining: cfg.MaxAttempts - c.Data.Attempts})
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[State], _ expired) error {
		return fail(c, ReasonExpired)
	})
	return d
}

func randomCode() string {
	n, err := rand.Int(rand.Reader, big.NewInt(1_000_000))
	if err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return fmt.Sprintf("%06d", n.Int64())
}
