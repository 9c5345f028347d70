package transport

import (
	"maps"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// FuzzHeaderRoundTrip checks that every message Send accepts comes back
// from its NATS headers exactly as sent, whatever its IDs and property
// values hold, and that decoding arbitrary headers never panics.
func FuzzHeaderRoundTrip(f *testing.F) {
	for _, s := range []string{"", "a", " leading", "trailing ", "~b64~x", "a.*>", "héllo ✓", "\tx", "~b64~!!"} {
		f.Add(s, s, "key", s)
	}
	f.Fuzz(func(t *testing.T, id, session, key, value string) {
		m := &Message{
			MessageID: id, SessionID: session, CorrelationID: value, ReplyTo: value, Subject: value,
			ContentType: value, Properties: map[string]string{key: value},
			ScheduledAt: time.Unix(1_700_000_000, 123456789).UTC(),
		}
		// Whatever the input, decoding must not panic.
		decodeHeader(nats.Header{key: {value}, HeaderPropertyPrefix + key: {value, id}, HeaderScheduledAt: {value}}, &Message{})
		if validateMessage(m, false) != nil {
			return // Send refuses it; nothing to round-trip
		}
		var got Message
		decodeHeader(encodeHeader(m), &got)
		if got.MessageID != id || got.SessionID != session || got.CorrelationID != value ||
			got.ReplyTo != value || got.Subject != value || got.ContentType != value ||
			!got.ScheduledAt.Equal(m.ScheduledAt) {
			t.Errorf("round trip changed fields:\ngot  %+v\nwant %+v", got, *m)
		}
		if want := map[string]string{key: value}; !maps.Equal(got.Properties, want) {
			t.Errorf("properties: got %q, want %q", got.Properties, want)
		}
		if u := unescapeValue(escapeValue(value)); u != value {
			t.Errorf("unescape(escape(%q)) = %q", value, u)
		}
	})
}
