package emailconfirm

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"time"

	"github.com/jetsaga/jetsaga/saga"
)

// Messages the saga takes.
type (
	// SignedUp starts the wait for an account's confirmation.
	SignedUp struct{ Account, Email string }
	// ConfirmEmail is the user following the link (the token is in it).
	ConfirmEmail struct{ Account, Token string }
)

// Timeout payloads.
type (
	remind  struct{}
	release struct{}
	forget  struct{}
)

// Messages the saga sends to the events queue.
type (
	// ConfirmationRequested asks the service to e-mail the link.
	ConfirmationRequested struct {
		Account, Email, Token string
		ExpiresAt             time.Time
	}
	// ReminderDue asks the service to e-mail a reminder with the link.
	ReminderDue struct {
		Account, Email, Token string
		ExpiresAt             time.Time
	}
	// Confirmed says the address is confirmed: activate the account.
	Confirmed struct{ Account, Email string }
	// AccountReleased says the link expired unused: delete the account
	// and free its name and address.
	AccountReleased struct {
		Account, Email string
		ExpiredAt      time.Time
	}
	// ConfirmationRefused says a confirmation was refused, for Reason
	// ReasonExpired or ReasonInvalidToken. ExpiredAt is when the link
	// expired (ReasonExpired) or expires (ReasonInvalidToken).
	ConfirmationRefused struct {
		Account, Email, Reason string
		ExpiredAt              time.Time
	}
)

// Reasons a ConfirmationRefused gives.
const (
	// ReasonExpired: the link expired and the account was released.
	ReasonExpired = "expired"
	// ReasonInvalidToken: the token is not the account's current one.
	ReasonInvalidToken = "invalid token"
)

// Stable names, so that messages survive renaming the Go types.
func (SignedUp) MessageName() string              { return "emailconfirm.SignedUp" }
func (ConfirmEmail) MessageName() string          { return "emailconfirm.ConfirmEmail" }
func (remind) MessageName() string                { return "emailconfirm.Remind" }
func (release) MessageName() string               { return "emailconfirm.Release" }
func (forget) MessageName() string                { return "emailconfirm.Forget" }
func (ConfirmationRequested) MessageName() string { return "emailconfirm.ConfirmationRequested" }
func (ReminderDue) MessageName() string           { return "emailconfirm.ReminderDue" }
func (Confirmed) MessageName() string             { return "emailconfirm.Confirmed" }
func (AccountReleased) MessageName() string       { return "emailconfirm.AccountReleased" }
func (ConfirmationRefused) MessageName() string   { return "emailconfirm.ConfirmationRefused" }

// State is the saga's data for one account.
type State struct {
	Email     string
	Token     string    // the link's secret
	ExpiresAt time.Time // when the account is (or was) released, UTC
	Released  bool      // the link expired; the saga only refuses confirmations now
}

// Config shapes the flow. The zero value is the production flow.
type Config struct {
	// Reminder is when the reminder goes out, after sign-up; one not
	// shorter than Expiry sends none. Default: 30m.
	Reminder time.Duration
	// Expiry is when the account is released, after sign-up.
	// Default: 1h.
	Expiry time.Duration
	// RefuseFor is how long after the release a confirmation is still
	// refused with ReasonExpired (the saga's state is kept that long);
	// later ones are dropped. Default: 7 days.
	RefuseFor time.Duration
	// Events is the queue the saga's messages go to.
	// Default: "signup-events".
	Events string
	// NewToken makes a link's secret. Default: 128 random bits, as text.
	NewToken func() string
}

// New returns the e-mail confirmation saga, named "emailconfirm". Its
// instances are keyed by the Account of the messages.
//
// A SignedUp for an account that is waiting for its confirmation changes
// nothing; for a released account it starts over with a new link. A
// ConfirmEmail for an account that is confirmed, or whose saga ended
// RefuseFor after the release, or that never signed up, is dropped.
func New(cfg Config) *saga.Definition[State] {
	if cfg.Reminder == 0 {
		cfg.Reminder = 30 * time.Minute
	}
	if cfg.Expiry == 0 {
		cfg.Expiry = time.Hour
	}
	if cfg.RefuseFor == 0 {
		cfg.RefuseFor = 7 * 24 * time.Hour
	}
	if cfg.Events == "" {
		cfg.Events = "signup-events"
	}
	if cfg.NewToken == nil {
		cfg.NewToken = rand.Text
	}

	// begin issues a link and requests the reminder and the release.
	begin := func(c *saga.Context[State], email string) error {
		c.Data = State{Email: email, Token: cfg.NewToken(), ExpiresAt: c.Now().Add(cfg.Expiry).UTC()}
		if cfg.Reminder > 0 && cfg.Reminder < cfg.Expiry {
			if _, err := c.RequestTimeout(cfg.Reminder, remind{}); err != nil {
				return err
			}
		}
		if _, err := c.RequestTimeout(cfg.Expiry, release{}); err != nil {
			return err
		}
		return c.Send(cfg.Events, ConfirmationRequested{Account: c.ID(), Email: email, Token: c.Data.Token, ExpiresAt: c.Data.ExpiresAt})
	}

	d := saga.Define[State]("emailconfirm")
	saga.StartedBy(d, saga.By(func(m SignedUp) string { return m.Account }),
		func(ctx context.Context, c *saga.Context[State], m SignedUp) error {
			switch {
			case c.IsNew():
				return begin(c, m.Email)
			case c.Data.Released: // signing up again after the release
				for _, p := range c.PendingTimeouts() {
					c.CancelTimeout(p.Handle) // the forget timeout
				}
				return begin(c, m.Email)
			}
			return nil // still waiting: the first link stands
		})
	saga.Handles(d, saga.By(func(m ConfirmEmail) string { return m.Account }),
		func(ctx context.Context, c *saga.Context[State], m ConfirmEmail) error {
			refuse := func(reason string) error {
				return c.Send(cfg.Events, ConfirmationRefused{Account: c.ID(), Email: c.Data.Email, Reason: reason, ExpiredAt: c.Data.ExpiresAt})
			}
			switch {
			case c.Data.Released:
				return refuse(ReasonExpired)
			case subtle.ConstantTimeCompare([]byte(m.Token), []byte(c.Data.Token)) != 1:
				return refuse(ReasonInvalidToken)
			}
			c.MarkComplete() // cancels the reminder and the release if pending
			return c.Send(cfg.Events, Confirmed{Account: c.ID(), Email: c.Data.Email})
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[State], _ remind) error {
		return c.Send(cfg.Events, ReminderDue{Account: c.ID(), Email: c.Data.Email, Token: c.Data.Token, ExpiresAt: c.Data.ExpiresAt})
	})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[State], _ release) error {
		c.Data.Released = true
		if _, err := c.RequestTimeout(cfg.RefuseFor, forget{}); err != nil {
			return err
		}
		return c.Send(cfg.Events, AccountReleased{Account: c.ID(), Email: c.Data.Email, ExpiredAt: c.Data.ExpiresAt})
	})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[State], _ forget) error {
		c.MarkComplete()
		return nil
	})
	return d
}
