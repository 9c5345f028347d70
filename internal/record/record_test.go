package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

// roundTrip encodes and decodes r, as a step's store does.
func roundTrip(t *testing.T, r *Record) *Record {
	t.Helper()
	b, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestInboxKeepsWithinRetention(t *testing.T) {
	const keep = time.Minute
	r := &Record{}
	const n = 1000
	for i := range n {
		if err := r.Remember(fmt.Sprint("m", i), t0.Add(time.Duration(i)*10*time.Millisecond), keep); err != nil {
			t.Fatal(err)
		}
		r = roundTrip(t, r)
	}
	if r.InboxLen() != n || len(r.Inbox) != InboxRecent || len(r.InboxOlder) != (n-InboxRecent)*InboxDigestLen {
		t.Fatalf("inbox: %d entries (%d recent, %d bytes older), want %d", r.InboxLen(), len(r.Inbox), len(r.InboxOlder), n)
	}
	for i := range n {
		if !r.Seen(fmt.Sprint("m", i)) {
			t.Fatalf("m%d not seen", i)
		}
	}
	if r.Seen("m-other") {
		t.Fatal("an identity never remembered is seen")
	}
	// 10 s later than the last: nothing is old enough to go.
	last := t0.Add(n * 10 * time.Millisecond)
	r.Forget(last.Add(10*time.Second), keep)
	if r.InboxLen() != n {
		t.Fatalf("forgot entries within the retention: %d left", r.InboxLen())
	}
	// 65 s after the first entries (the first 5 s of them, 500, are
	// older than keep, give or take a second of rounding).
	r.Forget(t0.Add(keep+5*time.Second), keep)
	if got := r.InboxLen(); got < n-500 || got > n-400 {
		t.Fatalf("after 65 s: %d entries, want about %d", got, n-450)
	}
	for i := 600; i < n; i++ {
		if !r.Seen(fmt.Sprint("m", i)) {
			t.Fatalf("m%d, within the retention, not seen", i)
		}
	}
	if r.Seen("m0") {
		t.Fatal("m0, beyond the retention, still seen")
	}
	// Long after: the newest InboxRecent stay.
	r.Forget(t0.Add(time.Hour), keep)
	if r.InboxLen() != InboxRecent || !r.Seen(fmt.Sprint("m", n-1)) || !r.Seen(fmt.Sprint("m", n-InboxRecent)) || r.Seen(fmt.Sprint("m", n-InboxRecent-1)) {
		t.Fatalf("long after: %d entries, want the newest %d", r.InboxLen(), InboxRecent)
	}
	total := 0
	for _, run := range r.InboxTimes {
		total += run.N
	}
	if total != r.InboxLen() {
		t.Fatalf("times count %d entries, the inbox holds %d", total, r.InboxLen())
	}
}

// TestInboxTimesNeverGoBack: an entry a dispatcher whose clock is behind
// commits counts as committed no earlier than the entry before it.
func TestInboxTimesNeverGoBack(t *testing.T) {
	r := &Record{}
	for i := range 300 {
		if err := r.Remember(fmt.Sprint("a", i), t0.Add(time.Minute), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		if err := r.Remember(fmt.Sprint("b", i), t0, time.Minute); err != nil { // a clock a minute behind
			t.Fatal(err)
		}
	}
	r.Forget(t0.Add(2*time.Minute), time.Minute)
	if r.InboxLen() != 310 {
		t.Fatalf("%d entries, want all 310", r.InboxLen())
	}
}

// TestInboxEarlierFormat: a record an earlier release wrote (the last 128
// identities, no times) loads with every identity, which counts as
// committed when the new release first steps on it; and a record the new
// release wrote, read and written by an earlier release, keeps the newest
// 128, as that release always did.
func TestInboxEarlierFormat(t *testing.T) {
	type earlier struct { // the inbox of releases before InboxTimes
		Inbox   []string  `json:"inbox,omitempty"`
		Updated time.Time `json:"updated"`
	}
	var old earlier
	for i := range InboxRecent {
		old.Inbox = append(old.Inbox, InboxDigest(fmt.Sprint("o", i)))
	}
	old.Updated = t0
	b, _ := json.Marshal(old)
	r, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Hour)
	for i := range 500 {
		if err := r.Remember(fmt.Sprint("n", i), now, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for i := range InboxRecent {
		if !r.Seen(fmt.Sprint("o", i)) {
			t.Fatalf("o%d of the earlier record lost", i)
		}
	}
	r.Forget(now.Add(2*time.Minute), time.Minute)
	if r.InboxLen() != InboxRecent {
		t.Fatalf("%d entries after the retention, want %d", r.InboxLen(), InboxRecent)
	}

	// The new format, as an earlier release reads it.
	r = &Record{}
	for i := range 500 {
		if err := r.Remember(fmt.Sprint("n", i), now, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	b, _ = Encode(r)
	old = earlier{}
	if err := json.Unmarshal(b, &old); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := 500 - InboxRecent; i < 500; i++ {
		want = append(want, InboxDigest(fmt.Sprint("n", i)))
	}
	if !slices.Equal(old.Inbox, want) {
		t.Fatalf("an earlier release reads %d identities, not the newest %d", len(old.Inbox), InboxRecent)
	}
}

func TestInboxMismatchedTimes(t *testing.T) {
	r := &Record{}
	for i := range 200 {
		if err := r.Remember(fmt.Sprint("m", i), t0, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	r.InboxTimes = r.InboxTimes[:0] // as if a tool dropped them
	r.InboxOlder = append(r.InboxOlder, 1, 2)
	if err := r.Remember("x", t0.Add(time.Hour), time.Minute); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if !r.Seen(fmt.Sprint("m", i)) {
			t.Fatalf("m%d lost", i)
		}
	}
	r.Forget(t0.Add(time.Hour+time.Minute+2*time.Second), time.Minute)
	if r.InboxLen() != InboxRecent {
		t.Fatalf("%d entries, want %d", r.InboxLen(), InboxRecent)
	}
}

func TestInboxFull(t *testing.T) {
	const keep = time.Minute
	r := &Record{}
	for i := range InboxLimit {
		if err := r.Remember(fmt.Sprint("m", i), t0, keep); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
	before := r.Clone()
	if err := r.Remember("one more", t0.Add(time.Second), keep); !errors.Is(err, ErrInboxFull) {
		t.Fatalf("Remember on a full inbox: %v, want ErrInboxFull", err)
	}
	if r.Seen("one more") || r.InboxLen() != InboxLimit || !r.Seen("m0") || !slices.Equal(r.InboxOlder, before.InboxOlder) {
		t.Fatal("a refused Remember changed the inbox")
	}
	if err := r.Remember("one more", t0.Add(keep+2*time.Second), keep); err != nil {
		t.Fatalf("once the entries aged out: %v", err)
	}
	if r.InboxLen() != InboxRecent || !r.Seen("one more") {
		t.Fatalf("%d entries", r.InboxLen())
	}
	if b, _ := Encode(before); len(b) > 700_000 {
		t.Errorf("a full inbox encodes to %d bytes", len(b))
	}
}

func TestInboxClone(t *testing.T) {
	r := &Record{}
	for i := range 200 {
		_ = r.Remember(fmt.Sprint("m", i), t0, time.Minute)
	}
	c := r.Clone()
	_ = c.Remember("x", t0.Add(time.Hour), time.Minute)
	if r.InboxLen() != 200 || r.Seen("x") || !r.Seen("m0") {
		t.Fatal("a clone shares its inbox")
	}
}

// BenchmarkInboxStep is the record's share of a step's CPU cost on an
// instance whose inbox holds n entries: decode, check the inbox, remember,
// encode twice (as a step does), for a record with 200 bytes of data.
// B/record is the encoded record's size. "strings" is the same inbox in
// the earlier format, every entry a string, for comparison.
func BenchmarkInboxStep(b *testing.B) {
	data := json.RawMessage(`{"Balance":12345,"Owner":"` + strings.Repeat("x", 170) + `"}`)
	for _, n := range []int{128, 1000, 10_000, 50_000 - 1} {
		r := &Record{JSONData: data, Started: t0, Updated: t0}
		for i := range n {
			_ = r.Remember(fmt.Sprint("m", i), t0.Add(time.Duration(i)*time.Millisecond), time.Hour)
		}
		enc, _ := Encode(r)
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			defer func() { b.ReportMetric(float64(len(enc)), "B/record") }()
			for i := 0; b.Loop(); i++ {
				r, err := Decode(enc)
				if err != nil {
					b.Fatal(err)
				}
				id := fmt.Sprint("new", i)
				if r.Seen(id) {
					b.Fatal("seen")
				}
				if err := r.Remember(id, t0.Add(time.Minute), time.Hour); err != nil {
					b.Fatal(err)
				}
				if _, err := Encode(r); err != nil {
					b.Fatal(err)
				}
				if _, err := Encode(r); err != nil {
					b.Fatal(err)
				}
			}
		})
		type earlier struct {
			Data  json.RawMessage `json:"data"`
			Inbox []string        `json:"inbox"`
		}
		old := earlier{Data: data}
		for i := range n {
			old.Inbox = append(old.Inbox, InboxDigest(fmt.Sprint("m", i)))
		}
		enc, _ = json.Marshal(old)
		b.Run(fmt.Sprintf("strings/entries=%d", n), func(b *testing.B) {
			defer func() { b.ReportMetric(float64(len(enc)), "B/record") }()
			for i := 0; b.Loop(); i++ {
				var r earlier
				if err := json.Unmarshal(enc, &r); err != nil {
					b.Fatal(err)
				}
				d := InboxDigest(fmt.Sprint("new", i))
				if slices.Contains(r.Inbox, d) {
					b.Fatal("seen")
				}
				r.Inbox = append(r.Inbox[1:], d)
				_, _ = json.Marshal(r)
				_, _ = json.Marshal(r)
			}
		})
	}
}
