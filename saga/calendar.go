package saga

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/timeout"
)

// Timeouts in business time: a handler requests a timeout by a calendar
// rule (RequestTimeoutBy); the dispatcher computes its instant once, from
// the handler's Now and a calendar of its Registry (WithCalendars), and
// keeps the rule, the calendar's name and version and the instant the
// rule counted from with the timeout, so that operators see the rule and
// ReplanTimeouts can compute the instant again under a new version.

// Properties of a timeout's message requested by a calendar rule, so that
// listings of the engines (ScheduledTimeouts, jetsaga timeouts list) show
// the rule beside the due time.
const (
	// PropertyRule carries the rule, as calendar.Rule.String writes it.
	PropertyRule = "jetsaga-rule"
	// PropertyCalendar and PropertyCalendarVersion name the calendar the
	// due time was computed with; absent if the rule needs none.
	PropertyCalendar        = "jetsaga-calendar"
	PropertyCalendarVersion = "jetsaga-calendar-version"
)

// WithCalendars gives the dispatcher the calendars that timeouts requested
// by a rule (Context.RequestTimeoutBy) are computed with, and that
// ReplanTimeouts looks new versions up in.
//
// The version of each calendar that new requests use, and the default
// calendar (that of a request that names none, OnCalendar), are fixed
// when the dispatcher is built (NewDispatcher), from what reg holds then:
// current names, for a calendar name, the version that requests use; a
// name not in current is used at the one version of it reg holds. A
// calendar reg holds at several versions must have one in current, or
// NewDispatcher returns an error matching ErrNoCurrentCalendar (and
// ErrInvalidOption); each of current must be in reg (else
// calendar.ErrUnknownCalendar). The first of current, or reg's only
// calendar, is the default. What reg gains later — a new version to
// re-plan to (ReplanTimeouts), or a calendar of another name — changes
// nothing for requests: deploy a new version as current, then re-plan.
func WithCalendars(reg *calendar.Registry, current ...calendar.Ref) Option {
	return optionFunc(func(c *config) error {
		if reg == nil {
			return fmt.Errorf("%w: nil calendar registry", ErrInvalidOption)
		}
		cur := make(map[string]calendar.Ref, len(current))
		for _, ref := range current {
			if _, err := reg.Lookup(ref); err != nil {
				return fmt.Errorf("%w: WithCalendars: %w", ErrInvalidOption, err)
			}
			if prev, dup := cur[ref.Name]; dup {
				return fmt.Errorf("%w: WithCalendars: two current versions of calendar %q: %s and %s", ErrInvalidOption, ref.Name, prev.Version, ref.Version)
			}
			cur[ref.Name] = ref
		}
		// Pin the version of every other calendar reg holds now.
		versions := make(map[string][]string)
		for _, ref := range reg.Refs() {
			versions[ref.Name] = append(versions[ref.Name], ref.Version)
		}
		for _, name := range slices.Sorted(maps.Keys(versions)) {
			vs := versions[name]
			if _, named := cur[name]; named {
				continue
			}
			if len(vs) > 1 {
				return fmt.Errorf("%w: %w: WithCalendars: the registry holds calendar %q at versions %q: name the one new requests use, e.g. saga.WithCalendars(reg, calendar.Ref{Name: %q, Version: %q})",
					ErrInvalidOption, ErrNoCurrentCalendar, name, vs, name, vs[len(vs)-1])
			}
			cur[name] = calendar.Ref{Name: name, Version: vs[0]}
		}
		c.calendars, c.currentCal, c.defaultCal = reg, cur, ""
		switch {
		case len(current) > 0:
			c.defaultCal = current[0].Name
		case len(versions) == 1:
			for name := range versions {
				c.defaultCal = name
			}
		}
		return nil
	})
}

// RuleOption qualifies a timeout requested by a rule (RequestTimeoutBy).
type RuleOption func(*ruleRequest)

type ruleRequest struct {
	calendar string
	from     time.Time
}

// OnCalendar computes the rule with the calendar named name, at the
// version WithCalendars makes current. Default: the dispatcher's default
// calendar (see WithCalendars).
func OnCalendar(name string) RuleOption { return func(r *ruleRequest) { r.calendar = name } }

// RuleFrom makes the rule count from t instead of the handler's Now: "seven
// business days before renewal" counts from the renewal. The instant is
// kept with the timeout; a re-plan counts from it again.
func RuleFrom(t time.Time) RuleOption { return func(r *ruleRequest) { r.from = t } }

// RequestTimeoutBy asks for payload to come back to this instance when
// rule falls due, counted from the handler's Now (or RuleFrom), as
// calendar.Rule.Due computes it with the calendar the dispatcher's
// registry holds (WithCalendars, OnCalendar). The instant is computed
// once, here, and returned with the timeout's handle, as PendingTimeouts
// lists it: At is the due time, for the saga's data and messages
// ("your grace period ends on ..."). The timeout keeps the rule, the
// calendar's name and version and the instant it counted from, which
// PendingTimeouts, Instance, ScheduledTimeouts and the jetsaga command
// show, and from which ReplanTimeouts computes it again under a new
// version of the calendar (a re-plan changes At; PendingTimeouts has the
// current one). A rule due in the past (seven business days before a
// renewal that is six days away) fires at once, as RequestTimeoutAt does.
//
// Errors match ErrPermanent and, beside those of RequestTimeoutAt, the
// calendar package's: calendar.ErrInvalidRule for an invalid rule or an
// unknown zone, calendar.ErrUnknownCalendar when the calendar is not in
// the registry (or the dispatcher has none), calendar.ErrNoBusinessDay
// when the calendar has no business day where the rule looks for one.
// On error the PendingTimeout is zero.
func (c *Context[S]) RequestTimeoutBy(rule calendar.Rule, payload any, opts ...RuleOption) (PendingTimeout, error) {
	req := ruleRequest{from: c.step.now}
	for _, o := range opts {
		if o != nil {
			o(&req)
		}
	}
	s := c.step
	at, p, err := s.d.planRule(rule, req)
	if err != nil {
		return PendingTimeout{}, Permanent(fmt.Errorf("saga %s/%s: timeout %T by rule %q: %w", s.sagaName, s.id, payload, rule, err))
	}
	h, err := s.requestTimeout(at, payload, p)
	if err != nil {
		return PendingTimeout{}, err
	}
	pt := PendingTimeout{Handle: h, Type: s.rec.Timeouts[string(h)].Type, At: at, Rule: p.rule, From: p.from}
	if p.cal != nil {
		pt.Calendar = *p.cal
	}
	return pt, nil
}

// planRule computes the due time of rule for a request.
func (d *Dispatcher) planRule(rule calendar.Rule, req ruleRequest) (time.Time, *plan, error) {
	// The rule is checked by DueIn, its zone loaded once per dispatcher
	// (time.LoadLocation, which Validate calls, costs ten microseconds).
	if req.from.IsZero() {
		return time.Time{}, nil, fmt.Errorf("%w: zero instant to count from", calendar.ErrInvalidRule)
	}
	p := &plan{rule: rule.String(), from: req.from.UTC()}
	var cal calendar.Calendar
	if rule.NeedsCalendar() || req.calendar != "" {
		ref, err := d.currentCalendar(req.calendar)
		if err == nil {
			cal, err = d.cfg.calendars.Lookup(ref)
		}
		if err != nil {
			// An invalid rule is the first thing to say.
			return time.Time{}, nil, cmp.Or(rule.Validate(), err)
		}
		p.cal = &ref
	}
	at, err := d.due(rule, req.from, cal)
	return at.UTC(), p, err
}

// due computes rule from from with cal, with the zone loaded once per
// dispatcher.
func (d *Dispatcher) due(rule calendar.Rule, from time.Time, cal calendar.Calendar) (time.Time, error) {
	loc, err := d.zones.Load(rule.Zone)
	if err != nil {
		return time.Time{}, err // a rule that names no zone too
	}
	return rule.DueIn(from, cal, loc)
}

// currentCalendar returns the version of the calendar name that requests
// use, as WithCalendars fixed it when the dispatcher was built; "" is the
// default calendar.
func (d *Dispatcher) currentCalendar(name string) (calendar.Ref, error) {
	if d.cfg.calendars == nil {
		return calendar.Ref{}, fmt.Errorf("%w: the dispatcher has no calendars (saga.WithCalendars)", calendar.ErrUnknownCalendar)
	}
	if name == "" {
		if d.cfg.defaultCal == "" {
			return calendar.Ref{}, fmt.Errorf("%w: no default calendar: the registry held %d calendars when the dispatcher was built; name one (saga.OnCalendar) or make one current (saga.WithCalendars)",
				calendar.ErrUnknownCalendar, len(d.cfg.currentCal))
		}
		name = d.cfg.defaultCal
	}
	if ref, ok := d.cfg.currentCal[name]; ok {
		return ref, nil
	}
	return calendar.Ref{}, fmt.Errorf("%w: no calendar named %q in the dispatcher's registry when it was built", calendar.ErrUnknownCalendar, name)
}

// label sets the properties that show p in engines' listings.
func (p *plan) label(props map[string]string) {
	props[PropertyRule] = p.rule
	if p.cal != nil {
		props[PropertyCalendar], props[PropertyCalendarVersion] = p.cal.Name, p.cal.Version
	} else {
		delete(props, PropertyCalendar)
		delete(props, PropertyCalendarVersion)
	}
}

// Replanned reports what re-planning did to one pending timeout requested
// by a rule on the calendar re-planned.
type Replanned struct {
	Saga, ID string
	Handle   TimeoutHandle
	Type     string
	Rule     string    // as calendar.Rule.String writes it
	From     time.Time // the instant the rule counts from
	// Old is the calendar the timeout was planned with, OldAt its due time
	// then; New and NewAt are the same after the re-plan. NewAt equal to
	// OldAt: the due time did not change, and the timeout stays scheduled
	// as it was (its record names the new version).
	Old, New     calendar.Ref
	OldAt, NewAt time.Time
	// Outcome says what the re-plan did, and, for a timeout moved to a
	// due time already past, what will happen to it.
	Outcome ReplanOutcome
	// Overdue is, for a timeout moved to a due time already past, how
	// long NewAt had passed at the re-plan, by the dispatcher's clock: the
	// timeout fires at once, at least that late. Zero otherwise.
	Overdue time.Duration
	// Err, if not nil, says why the timeout was left as it was (New and
	// NewAt are then zero): the rule could not be read, or the new
	// calendar has no business day where the rule looks for one.
	Err error
}

// Changed reports whether the re-plan moved the timeout.
func (r Replanned) Changed() bool { return r.Err == nil && !r.NewAt.Equal(r.OldAt) }

// ReplanOutcome is what a re-plan did to one timeout (Replanned.Outcome).
// A timeout moved to a due time already past fires at once, and its
// type's catch-up policy (CatchUp, HandleLate) sees it late: the outcomes
// after ReplanMoved say what that policy will do with it, judged at the
// re-plan (a timeout handled later is later still).
type ReplanOutcome int

const (
	// ReplanFailed: the timeout was left as it was; Replanned.Err says
	// why.
	ReplanFailed ReplanOutcome = iota
	// ReplanUnchanged: the due time is the same; the timeout's record
	// names the new version.
	ReplanUnchanged
	// ReplanMoved: the timeout is scheduled again for NewAt, still to
	// come.
	ReplanMoved
	// ReplanMovedPast: NewAt had already passed; the timeout fires at
	// once and is handled: within its type's tolerance, under
	// CatchUpFire, or as the latest overdue one of its type under
	// CatchUpCoalesce. A dispatcher that does not run the saga type (the
	// jetsaga command's) does not know the type's policy and reports
	// every timeout moved into the past so; the policy applies when it
	// arrives.
	ReplanMovedPast
	// ReplanMovedSkipped: NewAt had passed by more than the tolerance of
	// the type's catch-up policy, which will drop it when it arrives
	// (CatchUpSkip, or CatchUpCoalesce with a later timeout of the type
	// overdue too): its handler will not run.
	ReplanMovedSkipped
	// ReplanMovedLate: NewAt had passed by more than the tolerance of
	// the type's HandleLate: the timeout fires at once and goes to the
	// late handler.
	ReplanMovedLate
	// ReplanMovedCoalesced: NewAt had passed by more than the tolerance
	// of the type's CatchUpCoalesce, and other timeouts of the type are
	// due at the same instant: whichever of them arrives first is
	// handled, the others dropped.
	ReplanMovedCoalesced
)

// String returns "failed", "unchanged", "moved", or, for a timeout moved
// to a due time already past, "moved (due in the past: fires at once)",
// "moved (due in the past: will be skipped by its catch-up policy)",
// "moved (due in the past: goes to its late handler)" or "moved (due in
// the past: coalesced, one of those due then is handled)".
func (o ReplanOutcome) String() string {
	switch o {
	case ReplanFailed:
		return "failed"
	case ReplanUnchanged:
		return "unchanged"
	case ReplanMoved:
		return "moved"
	case ReplanMovedPast:
		return "moved (due in the past: fires at once)"
	case ReplanMovedSkipped:
		return "moved (due in the past: will be skipped by its catch-up policy)"
	case ReplanMovedLate:
		return "moved (due in the past: goes to its late handler)"
	case ReplanMovedCoalesced:
		return "moved (due in the past: coalesced, one of those due then is handled)"
	}
	return fmt.Sprintf("ReplanOutcome(%d)", int(o))
}

// ReplanTimeouts plans again, under the calendar to (a version in the
// dispatcher's registry, WithCalendars), every pending timeout of saga
// sagaName requested by a rule on a calendar of to's name at another
// version: each is computed from its rule and the instant it counted from,
// and, if its due time changes, cancelled on its engine and scheduled
// again for the new one, under the same handle. Instances are found
// through the engines' listings (ScheduledTimeouts) and each is re-planned
// as one step (see ReplanInstance), so a re-plan never races a handler.
//
// The result has one entry per such timeout, in instance order: moved,
// unchanged, or left as it was with its error (Replanned.Outcome). A
// timeout moved to a due time already past fires at once: its outcome
// says so, and what its type's catch-up policy will do with it (skip it,
// hand it to the late handler). The error joins what made
// an instance's re-plan fail as a whole (its timeouts are then not in the
// result); an error matching ErrEffectsPending says that an instance's
// re-plan was committed but carrying it out to the engine failed, and is
// retried (see EffectsPending): its entries are in the result.
//
// Timeouts keep their instants when a calendar changes until they are
// re-planned; requests made before the dispatcher's current version
// (WithCalendars) changes keep using the old one. Deploy the new version
// as current first, then re-plan.
func (d *Dispatcher) ReplanTimeouts(ctx context.Context, sagaName string, to calendar.Ref) ([]Replanned, error) {
	if _, err := d.lookupCalendar(to); err != nil {
		return nil, err
	}
	ids := make(map[string]bool)
	var errs []error
	for st, err := range d.ScheduledTimeouts(ctx, sagaName) {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st.Calendar.Name == to.Name {
			ids[st.ID] = true
		}
	}
	var out []Replanned
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		res, err := d.ReplanInstance(ctx, sagaName, id, to)
		out = append(out, res...)
		if err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	return out, errors.Join(errs...)
}

func (d *Dispatcher) lookupCalendar(ref calendar.Ref) (calendar.Calendar, error) {
	if d.cfg.calendars == nil {
		return nil, fmt.Errorf("%w: %s: the dispatcher has no calendars (saga.WithCalendars)", calendar.ErrUnknownCalendar, ref)
	}
	return d.cfg.calendars.Lookup(ref)
}

// ReplanInstance re-plans the pending timeouts of one instance under the
// calendar to, as ReplanTimeouts does, as a step like CancelTimeouts: it
// carries out any effects an earlier step left pending, commits the new
// due times (again on fresh state after a conflict with a concurrent
// step), then cancels and schedules the moved timeouts on their engines.
// An error other than ErrEffectsPending means that nothing changed.
func (d *Dispatcher) ReplanInstance(ctx context.Context, sagaName, id string, to calendar.Ref) ([]Replanned, error) {
	if err := validateID(id); err != nil {
		return nil, fmt.Errorf("%w: %s/%.64q: %w", ErrNotFound, sagaName, id, err)
	}
	cal, err := d.lookupCalendar(to)
	if err != nil {
		return nil, err
	}
	if _, err := d.open(ctx); err != nil {
		return nil, err
	}
	var out []Replanned
	u, err := d.update(ctx, update{
		saga: sagaName, id: id, identity: "replan:" + strconv.FormatInt(d.cfg.now().UnixNano(), 10),
		failed: "nothing re-planned",
		change: func(rec *record) (changed bool, _ error) {
			if rec.Completed {
				out = nil
				return false, nil
			}
			s := &stepState{d: d, sagaName: sagaName, id: id, key: storeKey(sagaName, id), rec: rec}
			out, changed = s.replan(to, cal)
			return changed, nil
		},
		pending: func() string { return "re-planned in its state; rescheduling on the engines failed" },
	})
	if err != nil && !u.committed {
		return nil, err
	}
	return out, err
}

// replan re-plans the instance's timeouts on to's calendar name in the
// record, adding the cancels and schedules to its outbox. changed reports
// whether the record changed.
func (s *stepState) replan(to calendar.Ref, cal calendar.Calendar) (out []Replanned, changed bool) {
	for _, tok := range slices.Sorted(maps.Keys(s.rec.Timeouts)) {
		te := s.rec.Timeouts[tok]
		if te.Calendar == nil || te.Calendar.Name != to.Name || *te.Calendar == to {
			continue
		}
		r := Replanned{Saga: s.sagaName, ID: s.id, Handle: TimeoutHandle(tok), Type: te.Type, Rule: te.Rule, From: te.From.Time(),
			Old: *te.Calendar, OldAt: te.At}
		at, err := s.replanOne(te, cal)
		if err != nil {
			r.Err, r.Outcome = err, ReplanFailed
			out = append(out, r)
			continue
		}
		r.New, r.NewAt, r.Outcome = to, at, ReplanMoved
		out = append(out, r)
		changed = true
		ref := to
		te.Calendar = &ref
		if at.Equal(te.At) {
			out[len(out)-1].Outcome = ReplanUnchanged
			s.rec.Timeouts[tok] = te
			continue
		}
		// Schedule it again under a new ID: the engines deduplicate a
		// schedule by ID, so the old one cannot be reused.
		msg := *te.Msg
		msg.Properties = maps.Clone(te.Msg.Properties)
		msg.ID = effectID(s.key, "replan\x00"+tok+"\x00"+te.ID+"\x00"+te.At.UTC().Format(time.RFC3339Nano)+"\x00"+to.String(), 0)
		(&plan{rule: te.Rule, cal: &ref, from: te.From.Time()}).label(msg.Properties)
		if te.Ref != "" {
			s.rec.Outbox = append(s.rec.Outbox, effect{Kind: effectCancel, Ref: te.Ref, Token: tok})
		}
		te.At, te.ID, te.Ref, te.Msg = at, msg.ID, "", &msg
		s.rec.Timeouts[tok] = te
		eff := effect{Kind: effectSchedule, Queue: s.d.queueName, Msg: &msg, At: at, Token: tok, ID: msg.ID}
		if rt := s.d.byName[s.sagaName]; rt != nil {
			eff.Engine = rt.timeoutEngine()
		}
		s.rec.Outbox = append(s.rec.Outbox, eff)
	}
	now := s.d.cfg.now()
	for i := range out {
		if out[i].Outcome == ReplanMoved && !out[i].NewAt.After(now) {
			out[i].Overdue = now.Sub(out[i].NewAt)
			out[i].Outcome = s.overdueOutcome(out[i], now)
		}
	}
	return out, changed
}

// overdueOutcome says what the catch-up policy of r's type will do with
// r, moved to a due time r.Overdue past, were it handled now (as
// stepState.catchUp decides).
func (s *stepState) overdueOutcome(r Replanned, now time.Time) ReplanOutcome {
	rt := s.d.byName[s.sagaName]
	if rt == nil {
		return ReplanMovedPast // not a saga of this dispatcher: its policy is unknown here
	}
	cu := rt.catchUpOf(r.Type)
	if !cu.set || r.Overdue <= cu.tolerance {
		return ReplanMovedPast
	}
	switch cu.policy {
	case CatchUpSkip:
		return ReplanMovedSkipped
	case CatchUpLate:
		return ReplanMovedLate
	case CatchUpCoalesce:
		tie := false
		for tok, other := range s.rec.Timeouts {
			if tok == string(r.Handle) || other.Type != r.Type || other.At.After(now) {
				continue
			}
			if other.At.After(r.NewAt) {
				return ReplanMovedSkipped // a later one of its type is overdue too: it goes instead
			}
			tie = tie || other.At.Equal(r.NewAt)
		}
		if tie {
			return ReplanMovedCoalesced
		}
	}
	return ReplanMovedPast
}

func (s *stepState) replanOne(te timeoutEntry, cal calendar.Calendar) (time.Time, error) {
	if te.Msg == nil || te.From.IsZero() {
		return time.Time{}, fmt.Errorf("%w: timeout record without its message or start instant", calendar.ErrInvalidRule)
	}
	rule, err := calendar.ParseRule(te.Rule)
	if err != nil {
		return time.Time{}, err
	}
	at, err := s.d.due(rule, te.From.Time(), cal)
	return at.UTC(), err
}

// scheduledPlan fills the rule fields of a listed timeout from its
// message's properties.
func scheduledPlan(st *ScheduledTimeout, p timeout.Pending) {
	st.Rule = p.Properties[PropertyRule]
	if name := p.Properties[PropertyCalendar]; name != "" {
		st.Calendar = calendar.Ref{Name: name, Version: p.Properties[PropertyCalendarVersion]}
	}
}
