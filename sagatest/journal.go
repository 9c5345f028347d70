package sagatest

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// event is one line of the journal.
type event struct {
	at     time.Time
	indent int
	text   string
}

type instanceKey struct{ saga, id string }

// record adds a journal line at time at; indent < 0 means 0.
func (e *Env) record(indent int, at time.Time, text string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.recordLocked(indent, at, text)
}

func (e *Env) recordLocked(indent int, at time.Time, text string) {
	e.events = append(e.events, event{at: at, indent: max(indent, 0), text: text})
}

// stepDone is the dispatcher's StepDone hook: it journals the step and
// what it changed in the instance, then the messages it sent.
func (e *Env) stepDone(ctx context.Context, info saga.StepInfo, res saga.StepResult) {
	now := time.Now()
	var cur *saga.Instance
	if info.Saga != "" && info.ID != "" {
		cur, _ = e.d.Instance(ctx, info.Saga, info.ID) // nil if there is none
	}
	e.mu.Lock()
	key := instanceKey{info.Saga, info.ID}
	prev := e.snaps[key]
	if cur != nil {
		e.snaps[key] = cur
	}
	lines := describeStep(info, res, prev, cur, now, e.offset, e.bodySuffix)
	if cur != nil && len(lines) > 0 {
		if w := e.waitLine(ctx, info.Saga, info.ID); w != "" {
			lines = append(lines, w)
		}
	}
	for i, line := range lines {
		e.recordLocked(min(i, 1), now, line)
	}
	if res.Err != nil {
		e.failures = append(e.failures, Failure{
			At: now.UTC(), Saga: info.Saga, ID: info.ID, MessageType: info.MessageType,
			Outcome: res.Outcome, Err: res.Err, Caller: e.caller,
		})
	}
	fresh := e.sentTo
	e.sentTo = nil
	e.mu.Unlock()
	for _, q := range fresh {
		e.watchQuiet(q)
	}
	e.observeAll(1)
}

// sent is the dispatcher's Sent hook: it notes the queues steps send to,
// which stepDone starts watching, so that the journal shows every
// message sent under the step that sent it.
func (e *Env) sent(_ context.Context, queue string, _ *transport.Message) {
	if queue == Queue {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.watched[queue]; !ok && !slices.Contains(e.sentTo, queue) {
		e.sentTo = append(e.sentTo, queue)
	}
}

// describeStep returns a headline for a step, then a line for each change
// it made to the instance.
func describeStep(info saga.StepInfo, res saga.StepResult, prev, cur *saga.Instance, now time.Time, offset func(time.Time) string, suffix func([]byte) string) []string {
	var prevT, curT []saga.PendingTimeout
	if prev != nil {
		prevT = prev.Timeouts
	}
	if cur != nil {
		curT = cur.Timeouts
	}
	pending := func(ts []saga.PendingTimeout, h saga.TimeoutHandle) bool {
		return slices.ContainsFunc(ts, func(p saga.PendingTimeout) bool { return p.Handle == h })
	}
	// The timeout this step handled: one of this type that was due and is
	// no longer pending.
	var fired saga.TimeoutHandle
	if res.Outcome == saga.Handled {
		for _, p := range prevT {
			if p.Type == info.MessageType && !p.At.After(now) && !pending(curT, p.Handle) {
				fired = p.Handle
				break // prevT is sorted by due time: the earliest
			}
		}
	}

	var head strings.Builder
	if info.Saga != "" {
		head.WriteString(info.Saga)
		if info.ID != "" {
			head.WriteString("/" + info.ID)
		}
		head.WriteString(": ")
	}
	if fired != "" {
		head.WriteString("timeout ")
	}
	fmt.Fprintf(&head, "%s %s", cmp.Or(info.MessageType, "(untyped message)"), res.Outcome)
	if res.Outcome == saga.Handled {
		if cur != nil && !cur.Completed && cur.Started.Equal(now) && (prev == nil || !prev.Started.Equal(cur.Started)) {
			head.WriteString(", started")
		}
		if cur != nil && cur.Completed && (prev == nil || !prev.Completed) {
			head.WriteString(", completed")
		}
	}
	if res.Err != nil && res.Outcome != saga.DeadLettered { // the dead letter's line gives the error
		fmt.Fprintf(&head, ": %s", firstLine(res.Err.Error()))
	}
	lines := []string{head.String()}
	if res.Outcome != saga.Handled {
		return lines
	}
	if cur != nil && !cur.Completed && (prev == nil || !bytes.Equal(prev.Data, cur.Data)) {
		lines = append(lines, "state"+suffix(cur.Data))
	}
	for _, p := range curT {
		if !pending(prevT, p.Handle) {
			lines = append(lines, fmt.Sprintf("timeout %s requested, due %s", p.Type, offset(p.At)))
		}
	}
	for _, p := range prevT {
		if p.Handle != fired && !pending(curT, p.Handle) {
			lines = append(lines, fmt.Sprintf("timeout %s cancelled, was due %s", p.Type, offset(p.At)))
		}
	}
	return lines
}

// Journal returns what happened in the Env so far, one line per event,
// by virtual time as an offset from Start: messages the test sent, steps
// the dispatcher ran (with their outcome and what they changed: state,
// timeouts requested and cancelled, completion), messages sent to the
// queues, and dead letters with their
// reason. Assertion failures print it. For example:
//
//	+0s        test sent billing.InvoiceIssued {"Invoice":"inv-1","Amount":100}
//	+0s        invoice/inv-1: billing.InvoiceIssued handled, started
//	+0s          state {"Due":100,"Reminders":0,"First":"3f9c…"}
//	+0s          timeout billing.FirstReminder requested, due +14d
//	+14d       invoice/inv-1: timeout billing.FirstReminder handled
//	+14d         state {"Due":100,"Reminders":1,"First":"3f9c…"}
//	+14d         sent billing.ReminderSent to mail {"Invoice":"inv-1","N":1}
//
// A message a step sent to a queue is indented under it. Bodies and
// state longer than DefaultJournalLimit bytes show as their size
// (WithJournalLimit).
func (e *Env) Journal() string {
	e.t.Helper()
	e.settle()
	return e.journal()
}

func (e *Env) journal() string {
	e.mu.Lock()
	evs := slices.Clone(e.events)
	e.mu.Unlock()
	slices.SortStableFunc(evs, func(a, b event) int { return a.at.Compare(b.at) })
	var sb strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&sb, "%-10s %s%s\n", e.offset(ev.at), strings.Repeat("  ", ev.indent), ev.text)
	}
	return sb.String()
}

// Failures show at most journalHead + journalTail lines of the journal.
const (
	journalHead = 40
	journalTail = 60
)

// journalSection is the journal as assertion failures show it: all of it,
// or its beginning and its end if it is long.
func (e *Env) journalSection() string {
	j := e.journal()
	if j == "" {
		j = "(empty)\n"
	}
	if lines := strings.SplitAfter(j, "\n"); len(lines) > journalHead+journalTail+1 {
		lines = lines[:len(lines)-1] // after the last newline
		omitted := len(lines) - journalHead - journalTail
		j = strings.Join(lines[:journalHead], "") +
			fmt.Sprintf("… %d lines left out (Env.Journal has them all) …\n", omitted) +
			strings.Join(lines[len(lines)-journalTail:], "")
	}
	return fmt.Sprintf("journal (now %s):\n%s", e.offset(time.Now()), indentLines(j))
}

// offset formats t as an offset from the Env's start: +0s, +5m0s, +14d,
// +14d2h0m0s.
func (e *Env) offset(t time.Time) string { return formatOffset(t.Sub(e.start)) }

func formatOffset(d time.Duration) string {
	sign := "+"
	if d < 0 {
		sign, d = "-", -d
	}
	const day = 24 * time.Hour
	days, rest := d/day, d%day
	switch {
	case days == 0:
		return sign + rest.String()
	case rest == 0:
		return fmt.Sprintf("%s%dd", sign, days)
	}
	return fmt.Sprintf("%s%dd%s", sign, days, rest)
}

// DefaultJournalLimit is the longest body or state, in bytes, that the
// journal shows as it is unless WithJournalLimit says otherwise; a
// longer one shows as its size: "state (283 bytes)".
const DefaultJournalLimit = 200

// bodySuffix shows an encoded body in a journal line with the default
// limit.
func bodySuffix(b []byte) string { return bodySuffixN(b, DefaultJournalLimit) }

// bodySuffix shows an encoded body in the Env's journal lines.
func (e *Env) bodySuffix(b []byte) string { return bodySuffixN(b, e.limit) }

// bodySuffixN shows an encoded body in a journal line: itself if it is
// printable text of at most limit bytes (any length if limit is 0), else
// its size.
func bodySuffixN(b []byte, limit int) string {
	if len(b) == 0 {
		return ""
	}
	if (limit == 0 || len(b) <= limit) && utf8.Valid(b) && !bytes.ContainsFunc(b, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return " " + string(b)
	}
	return fmt.Sprintf(" (%d bytes)", len(b))
}

// firstLine returns the first line of s, shortened to 300 bytes.
func firstLine(s string) string {
	s, _, cut := strings.Cut(s, "\n")
	if len(s) > 300 {
		s, cut = s[:300], true
	}
	if cut {
		s += " …"
	}
	return strings.ToValidUTF8(s, "")
}

func indentLines(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n  ") + "\n"
}

// messageName returns the name a message travels under, as saga names it:
// its MessageName method, else its Go type's package-qualified name.
func messageName(m any) string {
	if n, ok := m.(saga.Named); ok {
		return n.MessageName()
	}
	t := reflect.TypeOf(m)
	if t == nil {
		return "<nil>"
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.String()
}
