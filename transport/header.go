package transport

import (
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Header names under which a Message travels in NATS. Properties use the
// prefix hdrProp followed by the key, which validPropKey keeps header-safe.
const (
	hdrMessageID     = "Jetsaga-Message-Id"
	hdrContentType   = "Jetsaga-Content-Type"
	hdrCorrelationID = "Jetsaga-Correlation-Id"
	hdrSessionID     = "Jetsaga-Session-Id"
	hdrReplyTo       = "Jetsaga-Reply-To"
	hdrSubject       = "Jetsaga-Subject"
	hdrScheduledAt   = "Jetsaga-Scheduled-At"
	hdrDLReason      = "Jetsaga-Dead-Letter-Reason"
	hdrDLDescription = "Jetsaga-Dead-Letter-Description"
	hdrDLSource      = "Jetsaga-Dead-Letter-Source"
	hdrDLSeq         = "Jetsaga-Dead-Letter-Seq"
	hdrDLEnqueuedAt  = "Jetsaga-Dead-Letter-Enqueued-At"
	hdrCancelled     = "Jetsaga-Cancelled"
	hdrCancelID      = "Jetsaga-Cancel-Id" // on a cancel record: which Cancel call wrote it
	hdrProp          = "Jetsaga-P-"
)

// DefaultMaxPayload is NATS's default max_payload, which the in-memory
// broker enforces too so that both refuse the same messages.
const DefaultMaxPayload = 1 << 20

// encodeHeader writes the sender-controlled fields of m, plus the
// dead-letter fields, as NATS headers.
func encodeHeader(m *Message) nats.Header {
	h := make(nats.Header, 8+len(m.Properties))
	set := func(k, v string) {
		if v != "" {
			h[k] = []string{escapeValue(v)}
		}
	}
	set(hdrMessageID, m.MessageID)
	set(hdrContentType, m.ContentType)
	set(hdrCorrelationID, m.CorrelationID)
	set(hdrSessionID, m.SessionID)
	set(hdrReplyTo, m.ReplyTo)
	set(hdrSubject, m.Subject)
	if !m.ScheduledAt.IsZero() {
		set(hdrScheduledAt, m.ScheduledAt.UTC().Format(time.RFC3339Nano))
	}
	set(hdrDLReason, m.DeadLetterReason)
	set(hdrDLDescription, m.DeadLetterDescription)
	set(hdrDLSource, m.DeadLetterSource)
	if m.DeadLetterSeq != 0 {
		set(hdrDLSeq, strconv.FormatUint(m.DeadLetterSeq, 10))
	}
	for k, v := range m.Properties {
		h[hdrProp+k] = []string{escapeValue(v)}
	}
	return h
}

// escapePrefix marks a header value stored base64-encoded. NATS trims
// leading and trailing whitespace from header values, so such values, and
// any that start with the prefix itself, are encoded to round-trip intact.
const escapePrefix = "~b64~"

func escapeValue(v string) string {
	if v == "" || v == strings.TrimSpace(v) && !strings.HasPrefix(v, escapePrefix) {
		return v
	}
	return escapePrefix + base64.RawURLEncoding.EncodeToString([]byte(v))
}

func unescapeValue(v string) string {
	rest, ok := strings.CutPrefix(v, escapePrefix)
	if !ok {
		return v
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return v
	}
	return string(b)
}

// decodeHeader fills the sender-controlled fields of m from h. Unknown
// headers, including NATS's own, are ignored.
func decodeHeader(h nats.Header, m *Message) {
	get := func(k string) string {
		if v := h[k]; len(v) > 0 {
			return unescapeValue(v[0])
		}
		return ""
	}
	m.MessageID = get(hdrMessageID)
	m.ContentType = get(hdrContentType)
	m.CorrelationID = get(hdrCorrelationID)
	m.SessionID = get(hdrSessionID)
	m.ReplyTo = get(hdrReplyTo)
	m.Subject = get(hdrSubject)
	if v := get(hdrScheduledAt); v != "" {
		m.ScheduledAt, _ = time.Parse(time.RFC3339Nano, v)
	}
	m.DeadLetterReason = get(hdrDLReason)
	m.DeadLetterDescription = get(hdrDLDescription)
	m.DeadLetterSource = get(hdrDLSource)
	if v := get(hdrDLSeq); v != "" {
		m.DeadLetterSeq, _ = strconv.ParseUint(v, 10, 64)
	}
	for k, v := range h {
		if key, ok := strings.CutPrefix(k, hdrProp); ok && len(v) > 0 {
			if m.Properties == nil {
				m.Properties = make(map[string]string)
			}
			m.Properties[key] = unescapeValue(v[0])
		}
	}
}

// wireSize is the size NATS counts against max_payload for m: the body
// plus the encoded header block, with room for the headers the transport
// and the server add (schedule headers, Nats-Msg-Id, timestamps).
func wireSize(m *Message) int { return sizeWith(encodeHeader(m), m.Body) }

func sizeWith(h nats.Header, body []byte) int {
	n := len(body) + len("NATS/1.0\r\n\r\n") + 512
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}
