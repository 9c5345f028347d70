package transport

import (
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Headers of jetsaga's own bookkeeping, not part of the wire format.
const (
	hdrCancelled = "Jetsaga-Cancelled"
	hdrCancelID  = "Jetsaga-Cancel-Id" // on a cancel record: which Cancel call wrote it
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
	set(HeaderMessageID, m.MessageID)
	set(HeaderContentType, m.ContentType)
	set(HeaderCorrelationID, m.CorrelationID)
	set(HeaderSessionID, m.SessionID)
	set(HeaderPartitionKey, m.PartitionKey)
	set(HeaderReplyTo, m.ReplyTo)
	set(HeaderSubject, m.Subject)
	if !m.ScheduledAt.IsZero() {
		set(HeaderScheduledAt, m.ScheduledAt.UTC().Format(time.RFC3339Nano))
	}
	set(HeaderDeadLetterReason, m.DeadLetterReason)
	set(HeaderDeadLetterDescription, m.DeadLetterDescription)
	set(HeaderDeadLetterSource, m.DeadLetterSource)
	if m.DeadLetterSeq != 0 {
		set(HeaderDeadLetterSeq, strconv.FormatUint(m.DeadLetterSeq, 10))
	}
	for k, v := range m.Properties {
		h[HeaderPropertyPrefix+k] = []string{escapeValue(v)}
	}
	return h
}

func escapeValue(v string) string {
	if v == "" || v == strings.TrimSpace(v) && !strings.HasPrefix(v, EscapePrefix) {
		return v
	}
	return EscapePrefix + base64.RawURLEncoding.EncodeToString([]byte(v))
}

func unescapeValue(v string) string {
	rest, ok := strings.CutPrefix(v, EscapePrefix)
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
	m.MessageID = get(HeaderMessageID)
	m.ContentType = get(HeaderContentType)
	m.CorrelationID = get(HeaderCorrelationID)
	m.SessionID = get(HeaderSessionID)
	m.PartitionKey = get(HeaderPartitionKey)
	m.ReplyTo = get(HeaderReplyTo)
	m.Subject = get(HeaderSubject)
	if v := get(HeaderScheduledAt); v != "" {
		m.ScheduledAt, _ = time.Parse(time.RFC3339Nano, v)
	}
	m.DeadLetterReason = get(HeaderDeadLetterReason)
	m.DeadLetterDescription = get(HeaderDeadLetterDescription)
	m.DeadLetterSource = get(HeaderDeadLetterSource)
	if v := get(HeaderDeadLetterSeq); v != "" {
		m.DeadLetterSeq, _ = strconv.ParseUint(v, 10, 64)
	}
	for k, v := range h {
		if key, ok := strings.CutPrefix(k, HeaderPropertyPrefix); ok && len(v) > 0 {
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
