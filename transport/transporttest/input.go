package transporttest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// testInput checks R5: malformed, oversized and hostile input gets a
// clear error and changes nothing; IDs with NATS subject syntax in them
// are data, never subjects; a closed broker says so.
func (s *suite) testInput(t *testing.T) {
	parallel(t, "MaxBodySize", s.testInputMaxBodySize)
	parallel(t, "QueueNames", s.testInputQueueNames)
	parallel(t, "HostileIDs", s.testInputHostileIDs)
	parallel(t, "HostileSessions", s.testInputHostileSessions)
	parallel(t, "InvalidMessages", s.testInputInvalidMessages)
	parallel(t, "TooLarge", s.testInputTooLarge)
	parallel(t, "InvalidArguments", s.testInputInvalidArguments)
	parallel(t, "Closed", s.testInputClosed)
	parallel(t, "CloseUnblocksReceive", s.testInputCloseUnblocks)
	parallel(t, "Reopen", s.testInputReopen)
}

func (s *suite) testInputQueueNames(t *testing.T) {
	b := s.newBroker(t)
	for _, name := range []string{"", "a.b", "a*", "a>", "a b", "a\tb", "a/b", "é", strings.Repeat("a", 65)} {
		if q, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: name}); !errors.Is(err, transport.ErrInvalidQueueName) {
			t.Errorf("OpenQueue(%q) = %v, %v; want %v", name, q, err, transport.ErrInvalidQueueName)
		}
		if err := b.DeleteQueue(t.Context(), name); !errors.Is(err, transport.ErrInvalidQueueName) {
			t.Errorf("DeleteQueue(%q) = %v, want %v", name, err, transport.ErrInvalidQueueName)
		}
	}
	// The longest valid name, and the full alphabet, work.
	long := queueName(t, "long")
	long = strings.Repeat("x", 64-len(long)) + long
	alpha := queueName(t, "alpha")
	alpha = "Az09_-" + alpha[len(alpha)-min(len(alpha), 58):]
	for _, name := range []string{long, alpha} {
		q := openQueue(t, b, transport.QueueConfig{Name: name})
		if q.Name() != name {
			t.Errorf("Queue.Name() = %q, want %q", q.Name(), name)
		}
		send(t, q, numbered("m", 0))
		receiveN(t, q, 1, awaitMargin)
	}
}

// hostile holds strings that mean something in NATS subjects, headers or
// JSON, plus non-ASCII text.
var hostile = []string{
	"a.b", "a.*", "a.>", "*", ">", "a b", " ", "a..b", ".a.", "a\\b", "a/b", "a:b",
	"a\"b", "{\"x\":1}", "NATS/1.0", "héllo ✓ 日本", "a%2Eb", "$JS.API.>", "_INBOX.x",
	" leading", "trailing ", "~b64~YQ", "=?utf-8?q?x?=",
}

func (s *suite) testInputHostileIDs(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	var want []*transport.Message
	for i, v := range hostile {
		m := &transport.Message{
			Body:          []byte(v),
			ContentType:   v,
			MessageID:     fmt.Sprintf("%s#%d", v, i),
			CorrelationID: v,
			SessionID:     v,
			ReplyTo:       v,
			Subject:       v,
			Properties:    map[string]string{"v": v, "Key_" + fmt.Sprint(i): v},
		}
		want = append(want, m.Clone())
		if i%2 == 0 {
			send(t, q, m)
		} else {
			schedule(t, q, m, time.Now().Add(-time.Second))
		}
	}
	got := receiveN(t, q, len(want), s.f.ActivationSlack+awaitMargin)
	byID := make(map[string]*transport.Message)
	for _, a := range got {
		byID[a.MessageID] = a.Message
	}
	for _, w := range want {
		g, ok := byID[w.MessageID]
		if !ok {
			t.Errorf("message with MessageID %q not received", w.MessageID)
			continue
		}
		checkSameContent(t, fmt.Sprintf("message %q", w.MessageID), g, w)
	}
	// The IDs also work for duplicate detection, exactly as given: each
	// is sent again the way it was first sent (in its session, which
	// picks its partition).
	for i, v := range hostile[:6] {
		id := fmt.Sprintf("%s#%d", v, i)
		m := &transport.Message{MessageID: id, SessionID: v}
		if i%2 == 1 {
			m.ScheduledAt = time.Now().Add(-time.Second)
		}
		if r := sendDup(t, q, m); !r.Duplicate {
			t.Errorf("Send with MessageID %q again: Duplicate false, want true", id)
		}
	}
	expectNone(t, q, s.f.ActivationSlack+quietMargin)
}

// testInputHostileSessions checks that session IDs with subject syntax
// are separate sessions: "a.*" is not a wildcard over "a.b".
func (s *suite) testInputHostileSessions(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{RequiresSession: true})
	ids := []string{"a.*", "a.>", "a.b", "a b", "a", " a", "a ", "*", ">", "a.b.c"}
	for i := range 2 {
		for _, id := range ids {
			send(t, q, &transport.Message{Body: fmt.Appendf(nil, "%s|%d", id, i), SessionID: id})
		}
	}
	for _, id := range ids {
		r := acceptSession(t, q, id)
		for i := range 2 {
			a := receiveSession(t, r, awaitMargin)
			if want := fmt.Sprintf("%s|%d", id, i); string(a.Body) != want || a.SessionID != id {
				t.Errorf("AcceptSession(%q): message %d is body %q session %q, want %q %q", id, i, a.Body, a.SessionID, want, id)
			}
			complete(t, a.Delivery)
		}
		d, err := r.Receive(withTimeout(t, 100*time.Millisecond))
		if err == nil {
			t.Errorf("AcceptSession(%q): got %s after its own two messages", id, describe(d.Message))
		}
		r.Close()
	}
	if ms := peekAll(t, q); len(ms) != 0 {
		t.Errorf("Peek after draining every session: seqs %s, want none", seqsOf(ms))
	}
}

func (s *suite) testInputInvalidMessages(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	tooMany := make(map[string]string)
	for i := range 65 {
		tooMany[fmt.Sprintf("k%d", i)] = "v"
	}
	for _, tc := range []struct {
		name string
		m    *transport.Message
	}{
		{"nil message", nil},
		{"MessageID with newline", &transport.Message{MessageID: "a\nb"}},
		{"MessageID with NUL", &transport.Message{MessageID: "a\x00"}},
		{"MessageID over 128 bytes", &transport.Message{MessageID: strings.Repeat("x", 129)}},
		{"SessionID with CR LF", &transport.Message{SessionID: "s\r\nNats-Msg-Id: x"}},
		{"SessionID over 128 bytes", &transport.Message{SessionID: strings.Repeat("x", 129)}},
		{"CorrelationID with tab", &transport.Message{CorrelationID: "c\tx"}},
		{"ReplyTo with DEL", &transport.Message{ReplyTo: "r\x7f"}},
		{"MessageID with C1 NEL", &transport.Message{MessageID: "a\u0085b"}},
		{"Subject with C1 CSI", &transport.Message{Subject: "s\u009b0m"}},
		{"property value with C1", &transport.Message{Properties: map[string]string{"k": "v\u0080"}}},
		{"Subject with escape", &transport.Message{Subject: "s\x1b[0m"}},
		{"Subject not UTF-8", &transport.Message{Subject: "\xff\xfe"}},
		{"ContentType with newline", &transport.Message{ContentType: "text/plain\n"}},
		{"property value with CR", &transport.Message{Properties: map[string]string{"k": "v\rx"}}},
		{"property value not UTF-8", &transport.Message{Properties: map[string]string{"k": "\xc3"}}},
		{"property key with dot", &transport.Message{Properties: map[string]string{"a.b": "v"}}},
		{"property key with space", &transport.Message{Properties: map[string]string{"a b": "v"}}},
		{"property key with colon", &transport.Message{Properties: map[string]string{"a:b": "v"}}},
		{"property key empty", &transport.Message{Properties: map[string]string{"": "v"}}},
		{"property key non-ASCII", &transport.Message{Properties: map[string]string{"ключ": "v"}}},
		{"property key over 64", &transport.Message{Properties: map[string]string{strings.Repeat("k", 65): "v"}}},
		{"65 properties", &transport.Message{Properties: tooMany}},
	} {
		if r, err := q.Send(t.Context(), keyed(q, tc.m)); !errors.Is(err, transport.ErrInvalidMessage) {
			t.Errorf("Send(%s) = %+v, %v; want %v", tc.name, r, err, transport.ErrInvalidMessage)
		}
		if seq, err := q.Schedule(t.Context(), keyed(q, tc.m), time.Now().Add(time.Hour)); !errors.Is(err, transport.ErrInvalidMessage) {
			t.Errorf("Schedule(%s) = %#x, %v; want %v", tc.name, seq, err, transport.ErrInvalidMessage)
		}
	}
	if ms := peekAll(t, q); len(ms) != 0 {
		t.Errorf("Peek after refused messages: seqs %s, want none", seqsOf(ms))
	}
	if r, want := send(t, q, numbered("m", 0)), homeSeq(q, 1); r.Seq != want {
		t.Errorf("Send after refused messages: Seq %#x, want %#x", r.Seq, want)
	}
}

func (s *suite) testInputTooLarge(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	bigProps := make(map[string]string)
	for i := range 64 {
		bigProps[fmt.Sprintf("p%d", i)] = strings.Repeat("v", 4000)
	}
	for _, tc := range []struct {
		name string
		m    *transport.Message
	}{
		{"body of 1 MiB + 1", &transport.Message{Body: make([]byte, transport.DefaultMaxPayload+1)}},
		{"body of 4 MiB", &transport.Message{Body: make([]byte, 4*transport.DefaultMaxPayload)}},
		{"body of 1 MiB - 64 KiB with 250 KiB of properties", &transport.Message{
			Body: make([]byte, transport.DefaultMaxPayload-64<<10), Properties: bigProps,
		}},
	} {
		if r, err := q.Send(t.Context(), keyed(q, tc.m)); !errors.Is(err, transport.ErrMessageTooLarge) {
			t.Errorf("Send(%s) = %+v, %v; want %v", tc.name, r, err, transport.ErrMessageTooLarge)
		}
		if seq, err := q.Schedule(t.Context(), keyed(q, tc.m), time.Now().Add(time.Hour)); !errors.Is(err, transport.ErrMessageTooLarge) {
			t.Errorf("Schedule(%s) = %#x, %v; want %v", tc.name, seq, err, transport.ErrMessageTooLarge)
		}
	}
	if ms := peekAll(t, q); len(ms) != 0 {
		t.Errorf("Peek after refused messages: seqs %s, want none", seqsOf(ms))
	}
	// Large, but within the limit: accepted, with the next seq.
	big := &transport.Message{Body: make([]byte, 512<<10), Properties: map[string]string{"k": "v"}}
	for i := range big.Body {
		big.Body[i] = byte(i)
	}
	if r, want := send(t, q, big), homeSeq(q, 1); r.Seq != want {
		t.Errorf("Send(512 KiB body) after refused messages: Seq %#x, want %#x", r.Seq, want)
	}
	if r, want := send(t, q, numbered("m", 0)), homeSeq(q, 2); r.Seq != want {
		t.Errorf("Send after refused messages: Seq %#x, want %#x", r.Seq, want)
	}
	got := receiveN(t, q, 2, awaitMargin)
	checkSameContent(t, "512 KiB message", got[0].Message, big)
}

func (s *suite) testInputInvalidArguments(t *testing.T) {
	b, q := s.open(t, transport.QueueConfig{})
	for _, max := range []int{0, -1} {
		if _, err := q.Peek(t.Context(), 0, max); !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("Peek(max %d) = %v, want %v", max, err, transport.ErrInvalidOption)
		}
	}
	send(t, q, numbered("m", 0))
	a := receiveOne(t, q, awaitMargin)
	for _, rd := range [][2]string{{"bad\nreason", "d"}, {"r", "bad\x00description"}} {
		if err := a.DeadLetter(t.Context(), rd[0], rd[1]); !errors.Is(err, transport.ErrInvalidMessage) {
			t.Errorf("DeadLetter(%q, %q) = %v, want %v", rd[0], rd[1], err, transport.ErrInvalidMessage)
		}
	}
	// A refused DeadLetter leaves the delivery unsettled.
	if err := a.Complete(t.Context()); err != nil {
		t.Errorf("Complete after refused DeadLetter: %v", err)
	}
	for _, cfg := range []transport.QueueConfig{
		{Partitions: -1},
		{Partitions: 1025},
		{MaxDeliveryCount: -1},
		{LockDuration: -time.Second},
		{DuplicateWindow: -time.Second},
		{Replicas: 6},
		{MaxBytes: -1},
	} {
		cfg.Name = queueName(t, "config")
		if _, err := b.OpenQueue(t.Context(), cfg); !errors.Is(err, transport.ErrInvalidConfig) {
			t.Errorf("OpenQueue(%+v) = %v, want %v", cfg, err, transport.ErrInvalidConfig)
		}
	}
}

func (s *suite) testInputClosed(t *testing.T) {
	b := s.newBroker(t)
	q := openQueue(t, b, transport.QueueConfig{})
	sq := openQueue(t, b, transport.QueueConfig{Name: queueName(t, "sessions"), RequiresSession: true})
	send(t, q, numbered("m", 0))
	pending := schedule(t, q, numbered("m", 1), time.Now().Add(time.Hour))
	a := receiveOne(t, q, awaitMargin)
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx := withTimeout(t, awaitMargin)
	for name, op := range map[string]func() error{
		"Send": func() error { _, err := q.Send(ctx, keyed(q, numbered("m", 2))); return err },
		"Schedule": func() error {
			_, err := q.Schedule(ctx, keyed(q, numbered("m", 3)), time.Now().Add(time.Hour))
			return err
		},
		"Cancel":            func() error { return q.Cancel(ctx, pending) },
		"CancelMany":        func() error { return q.CancelMany(ctx, []uint64{pending})[0] },
		"Peek":              func() error { _, err := q.Peek(ctx, 0, 10); return err },
		"Receive":           func() error { _, err := q.Receive(ctx, 1); return err },
		"Complete":          func() error { return a.Complete(ctx) },
		"DeadLetterQueue":   func() error { _, err := q.DeadLetterQueue().Peek(ctx, 0, 10); return err },
		"AcceptSession":     func() error { _, err := sq.AcceptSession(ctx, "s"); return err },
		"AcceptNextSession": func() error { _, err := sq.AcceptNextSession(ctx); return err },
		"OpenQueue": func() error {
			_, err := b.OpenQueue(ctx, transport.QueueConfig{Name: queueName(t, "after")})
			return err
		},
		"DeleteQueue": func() error { return b.DeleteQueue(ctx, q.Name()) },
	} {
		if err := op(); !errors.Is(err, transport.ErrClosed) {
			t.Errorf("%s after Broker.Close = %v, want %v", name, err, transport.ErrClosed)
		}
	}
}

// testInputCloseUnblocks closes a broker while a Receive waits on it: the
// Receive returns ErrClosed rather than waiting for its context.
func (s *suite) testInputCloseUnblocks(t *testing.T) {
	b, q := s.open(t, transport.QueueConfig{})
	done := make(chan error, 1)
	go func() {
		_, err := q.Receive(withTimeout(t, 30*time.Second), 1)
		done <- err
	}()
	// Give Receive a moment to start waiting. There is no condition to
	// poll for; if it has not started yet, it must return ErrClosed all
	// the same.
	<-time.After(100 * time.Millisecond)
	closing := time.Now()
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if took := time.Since(closing); took > time.Second {
		t.Logf("Close took %v with a Receive waiting", took)
	}
	select {
	case err := <-done:
		if !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Receive waiting while the broker closed = %v, want %v", err, transport.ErrClosed)
		}
	case <-time.After(promptMargin):
		t.Errorf("Receive still waiting %v after the broker closed, want it to return %v", promptMargin, transport.ErrClosed)
	}
}

func (s *suite) testInputReopen(t *testing.T) {
	b, q := s.open(t, transport.QueueConfig{})
	send(t, q, numbered("m", 0))
	for _, tc := range []struct {
		name string
		cfg  transport.QueueConfig
	}{
		{"Partitions: 3 more", transport.QueueConfig{Name: q.Name(), Partitions: q.Config().Partitions + 3}},
		{"RequiresSession false to true", transport.QueueConfig{Name: q.Name(), Partitions: keyedConfig(t, b, q.Name(), 0), RequiresSession: true}},
	} {
		if _, err := b.OpenQueue(t.Context(), tc.cfg); !errors.Is(err, transport.ErrInvalidConfig) {
			t.Errorf("OpenQueue changing %s = %v, want %v", tc.name, err, transport.ErrInvalidConfig)
		}
	}
	// Reopening with the same partitioning keeps the queue and its seqs.
	again, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: q.Name(), Partitions: keyedConfig(t, b, q.Name(), 0), LockDuration: 5 * time.Second})
	if err != nil {
		t.Fatalf("OpenQueue with the same Partitions: %v", err)
	}
	if r, want := send(t, again, numbered("m", 1)), homeSeq(q, 2); r.Seq != want {
		t.Errorf("Send after reopening: Seq %#x, want %#x", r.Seq, want)
	}
	if ms := peekAll(t, q); len(ms) != 2 {
		t.Errorf("Peek through the first handle: seqs %s, want [0x1 0x2]", seqsOf(ms))
	}

	// And the other way round: 4 partitions to 1.
	name := queueName(t, "partitioned")
	openQueue(t, b, transport.QueueConfig{Name: name, Partitions: 4})
	if _, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: name}); !errors.Is(err, transport.ErrInvalidConfig) {
		t.Errorf("OpenQueue changing Partitions 4 to 1 (the default) = %v, want %v", err, transport.ErrInvalidConfig)
	}
}

// testInputMaxBodySize checks that Broker.MaxBodySize is the real limit:
// a body of that size is stored, one byte more is refused.
func (s *suite) testInputMaxBodySize(t *testing.T) {
	b, q := s.open(t, transport.QueueConfig{})
	m := keyed(q, &transport.Message{MessageID: "big", Properties: map[string]string{"k": strings.Repeat("v", 1000)}})
	n := b.MaxBodySize(m)
	if n <= 0 || n >= 1<<20 {
		t.Fatalf("MaxBodySize = %d, want a little under 1 MiB", n)
	}
	m.Body = make([]byte, n+1)
	if _, err := q.Send(t.Context(), keyed(q, m)); !errors.Is(err, transport.ErrMessageTooLarge) {
		t.Errorf("Send of MaxBodySize+1 bytes: %v, want %v", err, transport.ErrMessageTooLarge)
	}
	if err := b.Validate(m); !errors.Is(err, transport.ErrMessageTooLarge) {
		t.Errorf("Validate of MaxBodySize+1 bytes: %v, want %v", err, transport.ErrMessageTooLarge)
	}
	m.Body = m.Body[:n]
	send(t, q, m)
}
