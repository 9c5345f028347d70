package schedule

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// DefaultHorizon is how far ahead a schedule's occurrences are planned
// when New is not given WithHorizon: each occurrence due within it is a
// message scheduled on the target for its time.
const DefaultHorizon = time.Minute

// MinHorizon bounds WithHorizon from below: a schedule is planned again
// when half of its horizon is left, which must outlast a Run killed while
// it holds the schedule's tick (MaxLockDuration plus the broker's grace).
const MinHorizon = 30 * time.Second

// MaxPlanned bounds how many occurrences of one schedule are planned at
// once: a schedule more frequent than MaxPlanned per horizon is planned
// MaxPlanned occurrences ahead, and again when half of them are due.
const MaxPlanned = 128

// maxWithdrawn bounds the withdrawn occurrences a record keeps.
const maxWithdrawn = 256

// maxReplans bounds the fresh message IDs tried for one occurrence whose
// earlier planned messages were cancelled (see planOne).
const maxReplans = 16

// planned is an occurrence planned ahead: a message scheduled on the
// target for its time (nominal plus jitter). Seq is its scheduled
// sequence number, 0 while it is only intended (the record is written
// before the message, see plan) or when it activated before its number
// was known. ID is its MessageID when that is not the occurrence ID: an
// occurrence planned again after its message was cancelled (the target
// remembers a cancelled ID) gets "~2", "~3", … appended.
type planned struct {
	At  time.Time `json:"at"`
	Seq uint64    `json:"seq,omitempty"`
	ID  string    `json:"id,omitempty"`
}

// fireAt is when the occurrence at t is due: t plus its jitter.
func (r *record) fireAt(t time.Time) time.Time {
	return t.Add(jitter(OccurrenceID(r.Name, t), r.Jitter))
}

// unresolved reports whether the plan holds intended occurrences whose
// messages are not known to be scheduled.
func (r *record) unresolved() bool {
	return slices.ContainsFunc(r.Plan, func(o planned) bool { return o.Seq == 0 && o.ID != activatedID })
}

// activatedID marks a planned occurrence whose message activated before
// its scheduled number was read back: nothing is left to cancel.
const activatedID = "-"

// settle counts the planned occurrences due by now, a prefix of the plan,
// as sent (the server activates them on time), calls sent for each, and
// moves Next past them. It returns how many.
func (r *record) settle(p *planner, now time.Time, sent func(planned)) (int, error) {
	n := 0
	for n < len(r.Plan) && !r.fireAt(r.Plan[n].At).After(now) {
		o := r.Plan[n]
		r.Sent++
		r.handled(o.At)
		if sent != nil {
			sent(o)
		}
		n++
	}
	if n == 0 {
		return 0, nil
	}
	last := r.Plan[n-1].At
	r.Plan = slices.Delete(r.Plan, 0, n)
	if len(r.Plan) > 0 {
		r.Next = r.Plan[0].At
		return n, nil
	}
	next, err := p.next(last)
	switch {
	case errors.Is(err, ErrNeverFires):
		r.Ended, r.Next = true, time.Time{}
	case err != nil:
		return n, err
	case !r.End.IsZero() && next.After(r.End):
		r.Ended, r.Next = true, time.Time{}
	default:
		r.Next = next
	}
	return n, nil
}

// extend adds to the plan, as intended occurrences (Seq 0), the
// occurrences after it whose time is within the horizon from now, up to
// MaxPlanned, and sets Wake: when the schedule is to be planned again.
// Next must be pending and not due (fire sends the due ones first).
func (s *Scheduler) extend(r *record, p *planner, now time.Time) error {
	if r.Paused || r.Ended || r.Next.IsZero() {
		return nil
	}
	t := r.Next
	if k := len(r.Plan); k > 0 {
		var err error
		if t, err = p.next(r.Plan[k-1].At); errors.Is(err, ErrNeverFires) {
			t = time.Time{}
		} else if err != nil {
			return err
		}
	}
	if !t.IsZero() && !r.End.IsZero() && t.After(r.End) {
		t = time.Time{}
	}
	for !t.IsZero() && len(r.Plan) < MaxPlanned && !r.fireAt(t).After(now.Add(s.horizon)) {
		r.Plan = append(r.Plan, planned{At: t})
		next, err := p.next(t)
		switch {
		case errors.Is(err, ErrNeverFires):
			next = time.Time{}
		case err != nil:
			return err
		case !r.End.IsZero() && next.After(r.End):
			next = time.Time{}
		}
		t = next
	}
	// Plan again when half the horizon is left before the first occurrence
	// not planned, or when half of a full plan is due; with nothing left
	// to plan, after the last one, to count it and end the schedule.
	switch {
	case t.IsZero() && len(r.Plan) > 0:
		r.Wake = r.fireAt(r.Plan[len(r.Plan)-1].At)
	case t.IsZero():
		r.Ended, r.Next, r.Wake = true, time.Time{}, time.Time{}
	default:
		r.Wake = r.fireAt(t).Add(-s.horizon / 2)
		if len(r.Plan) == MaxPlanned {
			r.Wake = r.fireAt(r.Plan[MaxPlanned/2].At)
		}
	}
	if len(r.Plan) > 0 {
		r.Next = r.Plan[0].At
	}
	return nil
}

// resolve schedules the messages of the plan's intended occurrences (in
// a record already written, so that every planned message is named by
// the record before it exists) and fills in their numbers. It is safe to
// call again, by any process: a message already scheduled under an ID is
// found again by that ID (the target reports the duplicate and its
// number).
func (s *Scheduler) resolve(ctx context.Context, r *record) error {
	for i, o := range r.Plan {
		if o.Seq != 0 || o.ID == activatedID {
			continue
		}
		o, err := s.planOne(ctx, r, o)
		if err != nil {
			return err
		}
		r.Plan[i] = o
	}
	return nil
}

// planOne schedules the message of the intended occurrence o on the
// target for its time, or finds the one already scheduled under its ID.
// A duplicate the target reports as cancelled (a Pause, a Replan, a
// deleted schedule of the same name) was never delivered: the target
// keeps its ID taken, so the occurrence is planned under the next free
// ID, "~2", "~3", …. Any other duplicate without a pending message was
// sent (it activated) once its time has come; before it, the target
// cannot tell (a lookup failed, or the server's clock is ahead), and
// planOne returns an error rather than guess: to try again later.
func (s *Scheduler) planOne(ctx context.Context, r *record, o planned) (planned, error) {
	tg, err := s.target(ctx, r)
	if err != nil {
		return o, err
	}
	base := OccurrenceID(r.Name, o.At)
	n := r.freeID(o.At)
	if o.ID != "" {
		if k, ok := cutReplan(o.ID, base); ok && k > n {
			n = k
		}
	}
	m := s.occurrenceMessage(r.Message, r.Name, o.At, CauseSchedule)
	m.ScheduledAt = r.fireAt(o.At)
	for confirmed := false; n <= maxReplans; {
		m.MessageID = replanID(base, n)
		res, err := tg.Send(ctx, m)
		if err != nil {
			return o, fmt.Errorf("schedule %s: plan %s: %w", r.Name, m.MessageID, err)
		}
		o.ID = ""
		if n > 1 {
			o.ID = m.MessageID
		}
		switch {
		case res.Seq != 0:
			o.Seq = res.Seq // scheduled now, or found scheduled
			return o, nil
		case res.Cancelled:
			n, confirmed = n+1, false
		case !res.Duplicate || !time.Now().Before(m.ScheduledAt):
			// Activated already (due at once), or sent before: there is
			// nothing to cancel.
			o.ID = activatedID
			return o, nil
		case !confirmed:
			// A duplicate neither pending nor cancelled before its time:
			// ask once more, lest a failed lookup pass for either.
			confirmed = true
		default:
			return o, fmt.Errorf("schedule %s: plan %s: the target remembers the ID, neither pending nor cancelled, before its time", r.Name, m.MessageID)
		}
	}
	return o, fmt.Errorf("schedule %s: plan %s: %d message IDs of the occurrence taken by cancelled messages", r.Name, base, maxReplans)
}

// sendNow sends m, the message of the occurrence at t, due now, under its
// first ID that no cancelled message took: past those the record withdrew
// (freeID), then past each the target reports as cancelled (a schedule of
// the same name deleted before this one was created). It reports whether
// the target dropped m as a duplicate of a message sent before.
func (s *Scheduler) sendNow(ctx context.Context, r *record, m *transport.Message, t time.Time) (dup bool, err error) {
	tg, err := s.target(ctx, r)
	if err != nil {
		return false, err
	}
	base := OccurrenceID(r.Name, t)
	for n := r.freeID(t); n <= maxReplans; n++ {
		m.MessageID = replanID(base, n)
		res, err := tg.Send(ctx, m)
		if err != nil {
			return false, fmt.Errorf("schedule %s: send %s: %w", r.Name, m.MessageID, err)
		}
		if !res.Cancelled {
			return res.Duplicate, nil
		}
	}
	return false, fmt.Errorf("schedule %s: send %s: %d message IDs of the occurrence taken by cancelled messages", r.Name, base, maxReplans)
}

// replanID is the n-th MessageID of the occurrence base: base itself,
// then base~2, base~3, ….
func replanID(base string, n int) string {
	if n <= 1 {
		return base
	}
	return base + "~" + strconv.Itoa(n)
}

// freeID returns n for the first ID of the occurrence at t (replanID)
// that no cancelled message of this record took: 1 unless the record
// withdrew it.
func (r *record) freeID(t time.Time) int {
	for _, w := range r.Withdrawn {
		if w.At.Equal(t) {
			if w.ID == "" {
				return 2
			}
			k, _ := cutReplan(w.ID, OccurrenceID(r.Name, t))
			return k + 1
		}
	}
	return 1
}

// withdrew notes that the message of the occurrence o was cancelled.
func (r *record) withdrew(o planned) {
	for i, w := range r.Withdrawn {
		if w.At.Equal(o.At) {
			r.Withdrawn[i].ID = o.ID
			return
		}
	}
	r.Withdrawn = append(r.Withdrawn, planned{At: o.At, ID: o.ID})
	if len(r.Withdrawn) > maxWithdrawn {
		r.Withdrawn = r.Withdrawn[len(r.Withdrawn)-maxWithdrawn:]
	}
}

func cutReplan(id, base string) (int, bool) {
	if len(id) <= len(base)+1 || id[:len(base)] != base || id[len(base)] != '~' {
		return 0, false
	}
	n, err := strconv.Atoi(id[len(base)+1:])
	return n, err == nil
}

// withdraw cancels the messages of the plan from its k-th occurrence on
// (see withdrawAll for the whole plan), definitely, before a Pause,
// Delete or Replan writes the record: a message that activated already
// (transport.ErrAlreadyActivated: due within the broker's cancel margin)
// counts as sent. An intended occurrence (Seq 0: its message may exist)
// is scheduled first to learn its number, then cancelled. Any outcome
// that is not definite returns an error and leaves the plan as it was:
// the caller writes nothing, and trying again is safe (a message
// cancelled before answers transport.ErrNotFound). On return the plan
// holds its first k occurrences and those after them that activated, and
// with k 0 it is empty and Next is the first occurrence not sent.
func (s *Scheduler) withdraw(ctx context.Context, r *record, p *planner, k int) error {
	if len(r.Plan) <= k {
		return nil
	}
	tg, err := s.target(ctx, r)
	if err != nil {
		return err
	}
	kept := slices.Clone(r.Plan[:k])
	plan := slices.Clone(r.Plan[k:])
	for i, o := range plan {
		if o.Seq == 0 && o.ID != activatedID {
			if plan[i], err = s.planOne(ctx, r, o); err != nil {
				return err
			}
		}
	}
	var seqs []uint64
	for _, o := range plan {
		if o.Seq != 0 {
			seqs = append(seqs, o.Seq)
		}
	}
	errs := tg.CancelMany(ctx, seqs)
	activated := make([]bool, len(plan))
	for i, j := 0, 0; i < len(plan); i++ {
		if plan[i].Seq == 0 {
			activated[i] = true
			continue
		}
		err := errs[j]
		j++
		switch {
		case err == nil || errors.Is(err, transport.ErrNotFound):
			r.withdrew(plan[i])
		case errors.Is(err, transport.ErrAlreadyActivated):
			activated[i] = true
		default:
			return fmt.Errorf("schedule %s: cancel the occurrence planned at %s: %w", r.Name, plan[i].At.UTC().Format(time.RFC3339Nano), err)
		}
	}
	if k > 0 {
		// The kept part goes on with those that activated after it; one
		// that activated after a cancelled one is counted, not planned.
		cancelled := false
		for i, o := range plan {
			switch {
			case activated[i] && !cancelled:
				kept = append(kept, o)
			case activated[i]:
				r.Sent++
			default:
				cancelled = true
			}
		}
		r.Plan = kept
		return nil
	}
	// Those that activated count as sent; Next stays at the first that
	// did not (an activated one after it is counted, not passed).
	first := -1
	for i, o := range plan {
		switch {
		case activated[i] && first < 0:
			r.Sent++
			r.handled(o.At)
		case activated[i]:
			r.Sent++
		case first < 0:
			first = i
		}
	}
	r.Plan = nil
	if first >= 0 {
		r.Next = plan[first].At
		return nil
	}
	next, err := p.next(plan[len(plan)-1].At)
	switch {
	case errors.Is(err, ErrNeverFires):
		r.Ended, r.Next = true, time.Time{}
	case err != nil:
		return err
	case !r.End.IsZero() && next.After(r.End):
		r.Ended, r.Next = true, time.Time{}
	default:
		r.Next = next
	}
	return nil
}
