package transporttest

import (
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// testBrowse checks S6: Peek and Browse show active and scheduled
// messages with their state, sequence number and scheduled time, in
// sequence order, page by page.
func (s *suite) testBrowse(t *testing.T) {
	parallel(t, "States", s.testBrowseStates)
	parallel(t, "Paging", s.testBrowsePaging)
	parallel(t, "Iterator", s.testBrowseIterator)
	parallel(t, "Settled", s.testBrowseSettled)
}

func (s *suite) testBrowseStates(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	if ms := peekAll(t, q); len(ms) != 0 {
		t.Fatalf("Peek on a new queue: %d messages, want 0", len(ms))
	}
	base := time.Now().Add(time.Hour)
	var want []*transport.Message
	// Interleave so that storage order differs from sequence order.
	for i := range 3 {
		at := base.Add(time.Duration(3-i) * time.Minute)
		m := numbered("scheduled", i)
		m.Subject = "s"
		seq := schedule(t, q, m, at)
		w := m.Clone()
		w.Seq, w.State, w.ScheduledAt = seq, transport.Scheduled, at
		want = append(want, w)

		m = numbered("active", i)
		m.Subject = "a"
		r := send(t, q, m)
		w = m.Clone()
		w.Seq, w.State = r.Seq, transport.Active
		want = append(want, w)
	}
	// Active seqs are below scheduled ones (ScheduledBit); within each
	// kind, the order is that of the calls.
	want = []*transport.Message{want[1], want[3], want[5], want[0], want[2], want[4]}

	got := peekAll(t, q)
	checkPeeked(t, "Peek(0, 10000)", got, want)
	if got, err := q.Peek(t.Context(), 1, 6); err != nil {
		t.Errorf("Peek(1, 6): %v", err)
	} else {
		checkPeeked(t, "Peek(1, 6)", got, want)
	}
	if got, err := q.Peek(t.Context(), want[2].Seq+1, 100); err != nil {
		t.Errorf("Peek(after the last active): %v", err)
	} else {
		checkPeeked(t, "Peek(after the last active)", got, want[3:])
	}
	if got, err := q.Peek(t.Context(), want[5].Seq+1, 100); err != nil || len(got) != 0 {
		t.Errorf("Peek(after the last message) = %d messages, %v; want none", len(got), err)
	}
}

// checkPeeked compares peeked messages with want by Seq, State,
// ScheduledAt and content.
func checkPeeked(t *testing.T, what string, got, want []*transport.Message) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: seqs %s, want %s", what, seqsOf(got), seqsOf(want))
		return
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Seq != w.Seq || g.State != w.State || !g.ScheduledAt.Equal(w.ScheduledAt) {
			t.Errorf("%s[%d]: seq %#x %v ScheduledAt %v, want seq %#x %v ScheduledAt %v",
				what, i, g.Seq, g.State, g.ScheduledAt, w.Seq, w.State, w.ScheduledAt)
		}
		checkSameContent(t, what, g, w)
	}
}

// testBrowsePaging reads a queue with small pages, from = last Seq + 1,
// and checks each message is visited exactly once, in order.
func (s *suite) testBrowsePaging(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	far := time.Now().Add(time.Hour)
	want := make(map[uint64]bool)
	for i := range 10 {
		want[send(t, q, numbered("active", i)).Seq] = true
		if i%3 == 0 {
			want[schedule(t, q, numbered("scheduled", i), far)] = true
		}
	}
	all := peekAll(t, q)
	if len(all) != len(want) {
		t.Fatalf("Peek: %d messages, want %d", len(all), len(want))
	}
	for _, max := range []int{1, 3, 4} {
		var visited []*transport.Message
		from := uint64(0)
		for pages := 0; ; pages++ {
			if pages > len(want)+1 {
				t.Fatalf("max %d: more pages than messages; paging does not advance", max)
			}
			page, err := q.Peek(t.Context(), from, max)
			if err != nil {
				t.Fatalf("Peek(%#x, %d): %v", from, max, err)
			}
			if len(page) > max {
				t.Errorf("Peek(%#x, %d): %d messages, want at most %d", from, max, len(page), max)
			}
			if len(page) == 0 {
				break
			}
			for _, m := range page {
				if m.Seq < from {
					t.Errorf("Peek(%#x, %d): seq %#x below from", from, max, m.Seq)
				}
			}
			visited = append(visited, page...)
			from = page[len(page)-1].Seq + 1
		}
		checkAscending(t, "pages", visited)
		if len(visited) != len(all) {
			t.Errorf("max %d: visited %s, want %s", max, seqsOf(visited), seqsOf(all))
			continue
		}
		for i := range visited {
			if visited[i].Seq != all[i].Seq {
				t.Errorf("max %d: visited %s, want %s", max, seqsOf(visited), seqsOf(all))
				break
			}
		}
	}
}

// testBrowseIterator checks Browse against Peek over more messages than
// one of Browse's pages, and that breaking out of it stops it.
func (s *suite) testBrowseIterator(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	const active, scheduled = 300, 20
	far := time.Now().Add(time.Hour)
	for i := range active {
		send(t, q, numbered("active", i))
	}
	for i := range scheduled {
		schedule(t, q, numbered("scheduled", i), far)
	}
	all := peekAll(t, q)
	if len(all) != active+scheduled {
		t.Fatalf("Peek: %d messages, want %d", len(all), active+scheduled)
	}
	checkAscending(t, "Peek", all)
	var browsed []*transport.Message
	for m, err := range q.Browse(t.Context(), 0) {
		if err != nil {
			t.Fatalf("Browse after %d messages: %v", len(browsed), err)
		}
		browsed = append(browsed, m)
	}
	if len(browsed) != len(all) {
		t.Fatalf("Browse: %d messages, want %d as Peek returns", len(browsed), len(all))
	}
	for i := range all {
		if browsed[i].Seq != all[i].Seq || browsed[i].State != all[i].State {
			t.Fatalf("Browse[%d]: seq %#x %v, want %#x %v", i, browsed[i].Seq, browsed[i].State, all[i].Seq, all[i].State)
		}
	}
	var n int
	for m, err := range q.Browse(t.Context(), all[5].Seq) {
		if err != nil {
			t.Fatalf("Browse: %v", err)
		}
		if m.Seq != all[5+n].Seq {
			t.Errorf("Browse(from %#x)[%d]: seq %#x, want %#x", all[5].Seq, n, m.Seq, all[5+n].Seq)
		}
		if n++; n == 3 {
			break
		}
	}
}

// testBrowseSettled checks that completed messages disappear from Peek,
// while locked and abandoned ones stay.
func (s *suite) testBrowseSettled(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	for i := range 5 {
		send(t, q, numbered("m", i))
	}
	ctx := withTimeout(t, awaitMargin)
	var ds []*transport.Delivery
	for len(ds) < 5 {
		got, err := q.Receive(ctx, 5-len(ds))
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		ds = append(ds, got...)
	}
	// All five are locked: they are still stored.
	if ms := peekAll(t, q); len(ms) != 5 {
		t.Errorf("Peek with all messages locked: seqs %s, want 1..5", seqsOf(ms))
	}
	for _, d := range ds {
		var err error
		if d.Seq == homeSeq(q, 2) || d.Seq == homeSeq(q, 4) {
			err = d.Complete(t.Context())
		} else {
			err = d.Abandon(t.Context())
		}
		if err != nil {
			t.Fatalf("settling seq %d: %v", d.Seq, err)
		}
	}
	ms := peekAll(t, q)
	if len(ms) != 3 || ms[0].Seq != homeSeq(q, 1) || ms[1].Seq != homeSeq(q, 3) || ms[2].Seq != homeSeq(q, 5) {
		t.Errorf("Peek after completing seqs 2 and 4: seqs %s, want the 1st, 3rd and 5th (local seqs 1, 3, 5)", seqsOf(ms))
	}
	for _, m := range ms {
		if m.State != transport.Active {
			t.Errorf("Peek: seq %d state %v, want %v", m.Seq, m.State, transport.Active)
		}
	}
}
