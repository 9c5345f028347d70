package saga

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// Catch-up policies: what a timeout handled long after its due time does.
// The dispatcher applies them as it handles a timeout, whatever engine
// delivered it, so they are the same on the transport engine and on
// Temporal (and in sagatest): lateness is the step's time, by the
// dispatcher's clock, minus the due time the instance's record holds.

// CatchUpPolicy says what happens to a timeout handled more than its
// type's tolerance after its due time (see OnTimeout).
type CatchUpPolicy int

const (
	// CatchUpFire handles the timeout as usual, however late. The
	// default; with a tolerance (CatchUp(CatchUpFire, d)) lateness beyond
	// it is still reported (Hooks.TimeoutLate).
	CatchUpFire CatchUpPolicy = iota
	// CatchUpSkip drops the timeout: its handler does not run, the
	// instance no longer waits for it, the step's outcome is Skipped, and
	// it is logged (Info) and reported (Hooks.TimeoutLate).
	CatchUpSkip
	// CatchUpCoalesce handles only the latest overdue timeout of the type
	// per instance: a late timeout of the type is skipped (as CatchUpSkip)
	// if the instance waits for another of the type with a later due time
	// that is also past; the latest one is handled, and the earlier ones
	// it overtook, whether delivered yet or not, are cancelled. So a
	// backlog of reminders after an outage sends one reminder, whatever
	// order the engine delivers them in.
	CatchUpCoalesce
	// CatchUpLate hands the timeout to the type's late handler (HandleLate)
	// instead of its handler, with how late it is.
	CatchUpLate
)

// String returns "fire", "skip", "coalesce" or "late".
func (p CatchUpPolicy) String() string {
	switch p {
	case CatchUpFire:
		return "fire"
	case CatchUpSkip:
		return "skip"
	case CatchUpCoalesce:
		return "coalesce"
	case CatchUpLate:
		return "late"
	}
	return fmt.Sprintf("CatchUpPolicy(%d)", int(p))
}

// TimeoutOption configures a timeout type's handling, given to OnTimeout.
type TimeoutOption interface{ apply(*catchUp) error }

type timeoutOptionFunc func(*catchUp) error

func (f timeoutOptionFunc) apply(c *catchUp) error { return f(c) }

// catchUp is a timeout type's catch-up policy.
type catchUp struct {
	policy    CatchUpPolicy
	tolerance time.Duration
	set       bool // a tolerance was given: lateness beyond it is reported
	late      any  // a LateHandler[S, T], checked by OnTimeout
}

// CatchUp sets the catch-up policy of the timeout type: a timeout handled
// more than tolerance after its due time is fired, skipped or coalesced
// (CatchUpFire, CatchUpSkip, CatchUpCoalesce). For CatchUpLate use
// HandleLate, which also takes the late handler. tolerance must not be
// negative.
func CatchUp(policy CatchUpPolicy, tolerance time.Duration) TimeoutOption {
	return timeoutOptionFunc(func(c *catchUp) error {
		if tolerance < 0 {
			return fmt.Errorf("%w: catch-up tolerance %v: must not be negative", ErrInvalidOption, tolerance)
		}
		switch policy {
		case CatchUpFire, CatchUpSkip, CatchUpCoalesce:
		case CatchUpLate:
			return fmt.Errorf("%w: CatchUp(CatchUpLate, ...) has no late handler: use HandleLate", ErrInvalidOption)
		default:
			return fmt.Errorf("%w: unknown catch-up policy %d", ErrInvalidOption, int(policy))
		}
		c.policy, c.tolerance, c.set = policy, tolerance, true
		return nil
	})
}

// Lateness tells a late handler (HandleLate) how late its timeout is.
type Lateness struct {
	// Due is the timeout's due time.
	Due time.Time
	// Late is how long after Due the step runs (by the dispatcher's
	// clock); more than Tolerance.
	Late time.Duration
	// Tolerance is the type's tolerance.
	Tolerance time.Duration
}

// LateHandler handles a timeout of type T handled more than its tolerance
// after its due time, instead of the type's handler. It is a step like any
// handler's: it may change c.Data and ask for effects.
type LateHandler[S, T any] func(ctx context.Context, c *Context[S], m T, l Lateness) error

// HandleLate sets the catch-up policy CatchUpLate: a timeout handled more
// than tolerance after its due time goes to h instead of the type's
// handler. h's types must be the OnTimeout's (else the definition is
// invalid: ErrInvalidDefinition).
func HandleLate[S, T any](tolerance time.Duration, h LateHandler[S, T]) TimeoutOption {
	return timeoutOptionFunc(func(c *catchUp) error {
		if tolerance < 0 {
			return fmt.Errorf("%w: catch-up tolerance %v: must not be negative", ErrInvalidOption, tolerance)
		}
		if h == nil {
			return fmt.Errorf("%w: nil late handler", ErrInvalidOption)
		}
		c.policy, c.tolerance, c.set, c.late = CatchUpLate, tolerance, true, h
		return nil
	})
}

// LateTimeout describes a timeout handled beyond its type's tolerance, for
// Hooks.TimeoutLate.
type LateTimeout struct {
	Saga, ID string
	Type     string // the timeout's message type
	Handle   TimeoutHandle
	// Occurrence is the number of the occurrence, for a recurring
	// timeout (Context.Occurrence); 0 for any other.
	Occurrence int
	Lateness
	// Policy is what was done with it: CatchUpFire (handled),
	// CatchUpSkip or CatchUpCoalesce with Skipped set (dropped), or
	// CatchUpCoalesce (the latest, handled), CatchUpLate (late handler).
	Policy  CatchUpPolicy
	Skipped bool
	// Coalesced counts the earlier timeouts of the type, overdue beyond the
	// tolerance, that this one (handled) cancelled; they are logged, not
	// reported one by one.
	Coalesced int
}

// catchUp applies the catch-up policy cu to the timeout being handled,
// token, whose entry te the step took out of the record: it returns nil if
// the policy does nothing to it, else what it does. A timeout to skip is
// to be committed without running a handler; one for the late handler has
// s.late set.
//
// Under CatchUpCoalesce a timeout that is handled — late or not — cancels
// the instance's earlier timeouts of its type that are overdue beyond the
// tolerance, so that none of them fires after it, whatever order the
// engine delivers a backlog in; and a late one is skipped if a later one
// of its type is overdue too.
func (s *stepState) catchUp(cu catchUp, token string, te timeoutEntry) *LateTimeout {
	if !cu.set {
		return nil
	}
	late := s.now.Sub(te.At)
	lt := &LateTimeout{Saga: s.sagaName, ID: s.id, Type: te.Type, Handle: TimeoutHandle(token), Occurrence: te.Occurrence, Policy: cu.policy,
		Lateness: Lateness{Due: te.At, Late: late, Tolerance: cu.tolerance}}
	switch cu.policy {
	case CatchUpSkip:
		lt.Skipped = late > cu.tolerance
	case CatchUpLate:
		if late > cu.tolerance {
			s.late = &lt.Lateness
		}
	case CatchUpCoalesce:
		var overtaken []string
		for tok, other := range s.rec.Timeouts {
			if other.Type != te.Type || other.At.After(s.now) {
				continue // another type, or not due yet
			}
			if late > cu.tolerance && other.At.After(te.At) {
				lt.Skipped = true // a later one is overdue too: it goes instead
				return lt
			}
			if !other.At.After(te.At) && s.now.Sub(other.At) > cu.tolerance {
				overtaken = append(overtaken, tok)
			}
		}
		slices.Sort(overtaken)
		for _, tok := range overtaken {
			s.cancelTimeout(tok)
		}
		lt.Coalesced = len(overtaken)
	}
	if late <= cu.tolerance {
		return nil
	}
	return lt
}

// reportLate logs a timeout that its policy skipped, and calls the
// TimeoutLate hook.
func (d *Dispatcher) reportLate(ctx context.Context, lt LateTimeout) {
	if lt.Skipped {
		attrs := []slog.Attr{slog.String("saga.type", lt.Saga), slog.String("saga.id", lt.ID), slog.String("timeout.id", string(lt.Handle)),
			slog.String("type", lt.Type), slog.String("policy", lt.Policy.String()),
			slog.Time("due", lt.Due), slog.Duration("late", lt.Late), slog.Duration("tolerance", lt.Tolerance)}
		if lt.Occurrence > 0 {
			attrs = append(attrs, slog.Int("occurrence", lt.Occurrence))
		}
		d.cfg.logger.LogAttrs(ctx, slog.LevelInfo, "saga: timeout skipped by its catch-up policy", attrs...)
	}
	if lt.Coalesced > 0 {
		d.cfg.logger.LogAttrs(ctx, slog.LevelInfo, "saga: earlier overdue timeouts cancelled by a coalesced one",
			slog.String("saga.type", lt.Saga), slog.String("saga.id", lt.ID), slog.String("timeout.id", string(lt.Handle)),
			slog.String("type", lt.Type), slog.Int("cancelled", lt.Coalesced))
	}
	if h := d.cfg.hooks.TimeoutLate; h != nil {
		h(ctx, lt)
	}
}
