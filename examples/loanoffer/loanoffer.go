package loanoffer

import (
	"context"
	"time"

	"github.com/jetsaga/jetsaga/saga"
)

// Messages the saga takes.
type (
	// OfferMade starts the wait for the customer's answer to a loan offer.
	OfferMade struct {
		Offer, Customer string
		Amount          int // in cents
	}
	// OfferViewed is the customer opening the offer.
	OfferViewed struct{ Offer string }
	// OfferAccepted is the customer accepting it.
	OfferAccepted struct{ Offer string }
)

// Timeout payloads.
type (
	viewNudge struct{}
	remind    struct{}
	expire    struct{}
)

// Messages the saga sends to the events queue.
type (
	// OfferSent asks the service to send the offer to the customer.
	OfferSent struct {
		Offer, Customer string
		Amount          int
		ExpiresAt       time.Time
	}
	// NudgeDue asks the service to nudge a customer who has not opened
	// the offer yet ("did you see our offer?").
	NudgeDue struct{ Offer, Customer string }
	// ReminderDue asks the service to remind the customer that the offer
	// expires soon.
	ReminderDue struct {
		Offer, Customer string
		ExpiresAt       time.Time
	}
	// LoanBooked says the customer accepted: book the loan.
	LoanBooked struct {
		Offer, Customer string
		Amount          int
	}
	// OfferExpired says the offer lapsed unanswered.
	OfferExpired struct {
		Offer, Customer string
		ExpiredAt       time.Time
	}
)

// Stable names, so that messages and pending timeouts survive renaming
// the Go types.
func (OfferMade) MessageName() string     { return "loanoffer.OfferMade" }
func (OfferViewed) MessageName() string   { return "loanoffer.OfferViewed" }
func (OfferAccepted) MessageName() string { return "loanoffer.OfferAccepted" }
func (viewNudge) MessageName() string     { return "loanoffer.ViewNudge" }
func (remind) MessageName() string        { return "loanoffer.Remind" }
func (expire) MessageName() string        { return "loanoffer.Expire" }
func (OfferSent) MessageName() string     { return "loanoffer.OfferSent" }
func (NudgeDue) MessageName() string      { return "loanoffer.NudgeDue" }
func (ReminderDue) MessageName() string   { return "loanoffer.ReminderDue" }
func (LoanBooked) MessageName() string    { return "loanoffer.LoanBooked" }
func (OfferExpired) MessageName() string  { return "loanoffer.OfferExpired" }

// State is the saga's data for one offer.
type State struct {
	Customer  string
	Amount    int
	ExpiresAt time.Time // UTC
	Viewed    bool
	Nudge     saga.TimeoutHandle // pending until viewed or nudged
}

// Config shapes the flow. The zero value is the production flow.
type Config struct {
	// Nudge is when a customer who has not opened the offer is nudged.
	// Default: 10 minutes.
	Nudge time.Duration
	// Reminder is when the reminder goes out. Default: 7 days.
	Reminder time.Duration
	// Expiry is when the offer lapses. Default: 14 days.
	Expiry time.Duration
	// Events is the queue the saga's messages go to.
	// Default: "loan-events".
	Events string
}

// Name is the saga's name: the saga type a timeout.Route names
// (Route.Sagas) and listings show.
const Name = "loanoffer"

// New returns the loan offer saga, named Name, keyed by the Offer of the
// messages. Its definition names no timeout engine: where its timeouts go
// is the dispatcher's timeout scheduler's business (a timeout.Router
// routes the 7- and 14-day ones to Temporal and the 10-minute nudge to
// JetStream, say), so the same definition runs on either engine, and in
// sagatest on a virtual clock.
func New(cfg Config) *saga.Definition[State] {
	if cfg.Nudge == 0 {
		cfg.Nudge = 10 * time.Minute
	}
	if cfg.Reminder == 0 {
		cfg.Reminder = 7 * 24 * time.Hour
	}
	if cfg.Expiry == 0 {
		cfg.Expiry = 14 * 24 * time.Hour
	}
	if cfg.Events == "" {
		cfg.Events = "loan-events"
	}

	d := saga.Define[State](Name)
	saga.StartedBy(d, saga.By(func(m OfferMade) string { return m.Offer }),
		func(ctx context.Context, c *saga.Context[State], m OfferMade) error {
			if !c.IsNew() {
				return nil // the offer stands as first made
			}
			c.Data = State{Customer: m.Customer, Amount: m.Amount, ExpiresAt: c.Now().Add(cfg.Expiry).UTC()}
			var err error
			if c.Data.Nudge, err = c.RequestTimeout(cfg.Nudge, viewNudge{}); err != nil {
				return err
			}
			if cfg.Reminder < cfg.Expiry {
				if _, err := c.RequestTimeout(cfg.Reminder, remind{}); err != nil {
					return err
				}
			}
			if _, err := c.RequestTimeout(cfg.Expiry, expire{}); err != nil {
				return err
			}
			return c.Send(cfg.Events, OfferSent{Offer: c.ID(), Customer: m.Customer, Amount: m.Amount, ExpiresAt: c.Data.ExpiresAt})
		})
	saga.Handles(d, saga.By(func(m OfferViewed) string { return m.Offer }),
		func(ctx context.Context, c *saga.Context[State], m OfferViewed) error {
			if !c.Data.Viewed {
				c.Data.Viewed = true
				c.CancelTimeout(c.Data.Nudge) // no nudge needed
			}
			return nil
		})
	saga.Handles(d, saga.By(func(m OfferAccepted) string { return m.Offer }),
		func(ctx context.Context, c *saga.Context[State], m OfferAccepted) error {
			if !c.Now().Before(c.Data.ExpiresAt) {
				return nil // accepted at the expiry instant, which won: the expiry's step ends the saga
			}
			c.MarkComplete() // cancels whichever timeouts are pending, on whichever engine
			return c.Send(cfg.Events, LoanBooked{Offer: c.ID(), Customer: c.Data.Customer, Amount: c.Data.Amount})
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[State], _ viewNudge) error {
		if c.Data.Viewed {
			return nil
		}
		return c.Send(cfg.Events, NudgeDue{Offer: c.ID(), Customer: c.Data.Customer})
	})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[State], _ remind) error {
		return c.Send(cfg.Events, ReminderDue{Offer: c.ID(), Customer: c.Data.Customer, ExpiresAt: c.Data.ExpiresAt})
	})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[State], _ expire) error {
		c.MarkComplete()
		return c.Send(cfg.Events, OfferExpired{Offer: c.ID(), Customer: c.Data.Customer, ExpiredAt: c.Data.ExpiresAt})
	})
	return d
}
