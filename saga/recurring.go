package saga

import (
	"fmt"
	"strconv"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	recordfmt "github.com/jetsaga/jetsaga/internal/record"
	"github.com/jetsaga/jetsaga/timeout"
)

// Recurring timeouts: one entry in the record, under one token (the
// handle), holds the pending occurrence. The step that handles an
// occurrence puts the next one in its place — computed from the nominal
// time of the one handled, not from the step's Now — before the handler
// runs, so that the handler sees it pending (and may cancel it), and the
// two commit together: a series never has more than one occurrence
// pending, and a step that does not commit schedules nothing.

// MinRecurringInterval is the shortest interval RequestRecurringTimeout
// takes.
const MinRecurringInterval = time.Second

// RequestRecurringTimeout asks for payload to come back to this instance
// every interval, the first time one interval after the handler's Now,
// each next one interval after the nominal time of the one before (so
// that a late occurrence does not move the series), until the handle is
// cancelled (CancelTimeout, in any later step, whichever occurrence is
// pending) or the instance completes. Each occurrence goes to the
// OnTimeout handler of payload's type, where TimeoutDue is its nominal
// time and Occurrence its number; its step and the scheduling of the
// next occurrence commit together.
//
// every must be at least MinRecurringInterval; else the error matches
// timeout.ErrInvalidTimeout and ErrPermanent. Other errors are those of
// RequestTimeoutAt. The PendingTimeout returned describes the first
// occurrence.
func (c *Context[S]) RequestRecurringTimeout(every time.Duration, payload any) (PendingTimeout, error) {
	s := c.step
	if every < MinRecurringInterval {
		return PendingTimeout{}, Permanent(fmt.Errorf("saga %s/%s: recurring timeout %T: %w: interval %v is shorter than %v",
			s.sagaName, s.id, payload, timeout.ErrInvalidTimeout, every, MinRecurringInterval))
	}
	h, err := s.requestTimeout(s.now.Add(every), payload, nil)
	if err != nil {
		return PendingTimeout{}, err
	}
	return s.makeRecurring(h, every, s.now.UTC()), nil
}

// RequestRecurringTimeoutBy asks for payload to come back to this
// instance at every occurrence of rule: the first is the rule counted
// from the handler's Now (or RuleFrom), as RequestTimeoutBy computes it;
// each next one is the rule counted from the nominal time of the one
// before, on the same calendar version — so "2 business days after, at
// 09:00" is every second business day at 09:00, whatever time each
// occurrence is handled. It recurs until the handle is cancelled
// (CancelTimeout) or the instance completes, like RequestRecurringTimeout.
// A new version of the calendar re-plans the pending occurrence
// (ReplanTimeouts, ReplanInstance), and the series goes on from it on the
// new version.
//
// A rule that does not move forward from its own due time (an instant
// rule, "end of this month") never recurs and is refused with an error
// matching calendar.ErrInvalidRule and ErrPermanent; other errors are
// those of RequestTimeoutBy.
func (c *Context[S]) RequestRecurringTimeoutBy(rule calendar.Rule, payload any, opts ...RuleOption) (PendingTimeout, error) {
	s := c.step
	pt, err := c.RequestTimeoutBy(rule, payload, opts...)
	if err != nil {
		return PendingTimeout{}, err
	}
	te := s.rec.Timeouts[string(pt.Handle)]
	if _, err := s.d.nextOccurrence(te); err != nil {
		s.cancelTimeout(string(pt.Handle))
		return PendingTimeout{}, Permanent(fmt.Errorf("saga %s/%s: recurring timeout %T by rule %q: %w", s.sagaName, s.id, payload, rule, err))
	}
	return s.makeRecurring(pt.Handle, 0, te.From.Time()), nil
}

// makeRecurring marks the timeout h, just requested, as the first
// occurrence of a series, and keeps its message for the next ones.
func (s *stepState) makeRecurring(h TimeoutHandle, every time.Duration, from time.Time) PendingTimeout {
	te := s.rec.Timeouts[string(h)]
	te.Every, te.Occurrence, te.From = every, 1, recordfmt.InstantOf(from)
	if te.Msg == nil {
		for _, e := range s.rec.Outbox {
			if e.Kind == effectSchedule && e.Token == string(h) {
				te.Msg = e.Msg.Clone()
			}
		}
	}
	s.rec.Timeouts[string(h)] = te
	return pendingOf(string(h), te)
}

// nextOccurrence computes the occurrence of te's series after te.
func (d *Dispatcher) nextOccurrence(te timeoutEntry) (time.Time, error) {
	if te.Every > 0 {
		return te.At.Add(te.Every).UTC(), nil
	}
	rule, err := calendar.ParseRule(te.Rule)
	if err != nil {
		return time.Time{}, err
	}
	var cal calendar.Calendar
	if te.Calendar != nil {
		if cal, err = d.lookupCalendar(*te.Calendar); err != nil {
			return time.Time{}, err
		}
	}
	next, err := d.due(rule, te.At, cal)
	if err == nil && rule.Kind == calendar.KindNext && !next.After(te.At) {
		err = fmt.Errorf("%w: rule %s from %s is %s", calendar.ErrInvalidRule, rule, te.At.Format(time.RFC3339), next.Format(time.RFC3339))
	}
	if err == nil && !next.After(te.At) {
		err = fmt.Errorf("%w: rule %s does not recur: from its due time %s it is due at %s again",
			calendar.ErrInvalidRule, rule, te.At.Format(time.RFC3339), next.Format(time.RFC3339))
	}
	return next.UTC(), err
}

// scheduleNext puts the next occurrence of the recurring timeout te,
// being handled under token, in its place: in the record under the same
// token, and on its engine once the step commits, under an ID fixed by
// the occurrence, so that a step run again schedules the same message.
func (s *stepState) scheduleNext(token string, te timeoutEntry) error {
	if te.Msg == nil {
		return Permanent(fmt.Errorf("saga %s/%s: recurring timeout %s: %w: its record has no message", s.sagaName, s.id, token, timeout.ErrInvalidTimeout))
	}
	next, err := s.d.nextOccurrence(te)
	if err != nil {
		return Permanent(fmt.Errorf("saga %s/%s: recurring timeout %s: next occurrence after %s: %w",
			s.sagaName, s.id, token, te.At.UTC().Format(time.RFC3339), err))
	}
	msg := te.Msg.Clone()
	msg.ID = effectID(s.key, "recur\x00"+token+"\x00"+strconv.Itoa(te.Occurrence)+"\x00"+te.At.UTC().Format(time.RFC3339Nano), 0)
	if te.Rule != "" {
		(&plan{rule: te.Rule, cal: te.Calendar, from: te.At.UTC()}).label(msg.Properties)
	}
	nte := te
	nte.At, nte.From, nte.ID, nte.Ref, nte.Msg, nte.Occurrence = next, recordfmt.InstantOf(te.At), msg.ID, "", msg, te.Occurrence+1
	if s.rec.Timeouts == nil {
		s.rec.Timeouts = make(map[string]timeoutEntry)
	}
	s.rec.Timeouts[token] = nte
	eff := effect{Kind: effectSchedule, Queue: s.d.queueName, Msg: msg, At: next, Token: token, ID: msg.ID}
	if s.rt != nil {
		eff.Engine = s.rt.timeoutEngine()
	}
	s.rec.Outbox = append(s.rec.Outbox, eff)
	return nil
}
