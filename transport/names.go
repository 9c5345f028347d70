package transport

import (
	"encoding/base64"
	"fmt"
	"strings"
	"unicode/utf8"
)

const (
	maxQueueName   = 64
	maxIDLen       = 128 // Service Bus's limit for MessageId and SessionId.
	maxPropKey     = 64
	maxPropCount   = 64
	maxHeaderValue = 4096
)

// ValidateQueueName reports whether name can name a queue: 1–64 characters
// of [A-Za-z0-9_-]. Such names are safe as NATS subject tokens and stream
// names. The error wraps ErrInvalidQueueName.
func ValidateQueueName(name string) error {
	if name == "" || len(name) > maxQueueName {
		return fmt.Errorf("%w: %q: must be 1-%d characters", ErrInvalidQueueName, name, maxQueueName)
	}
	for _, r := range name {
		if !isNameRune(r) {
			return fmt.Errorf("%w: %q: only A-Z a-z 0-9 _ - allowed", ErrInvalidQueueName, name)
		}
	}
	return nil
}

func isNameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-'
}

// validID checks an identifier that is stored in a header and may be
// encoded into a subject token: UTF-8 without control characters (C0, DEL
// and C1), at most 128 bytes. Dots, wildcards and spaces are allowed; they never reach a
// subject unencoded (see subjectToken).
func validID(field, v string) error {
	if len(v) > maxIDLen {
		return invalid(field, "longer than %d bytes", maxIDLen)
	}
	return validValue(field, v)
}

func validValue(field, v string) error {
	if !utf8.ValidString(v) {
		return invalid(field, "not valid UTF-8")
	}
	if len(v) > maxHeaderValue {
		return invalid(field, "longer than %d bytes", maxHeaderValue)
	}
	for _, r := range v {
		if isControl(r) {
			return invalid(field, "contains control character %U", r)
		}
	}
	return nil
}

// isControl reports whether r is a C0 or C1 control character or DEL.
func isControl(r rune) bool { return r < 0x20 || r >= 0x7f && r <= 0x9f }

func validPropKey(k string) error {
	if k == "" || len(k) > maxPropKey {
		return invalid("property key", "%q must be 1-%d characters", k, maxPropKey)
	}
	for _, r := range k {
		if !isNameRune(r) {
			return invalid("property key", "%q: only A-Z a-z 0-9 _ - allowed", k)
		}
	}
	return nil
}

// subjectToken encodes an arbitrary ID as one NATS subject token. The
// URL-safe base64 alphabet has no '.', '*', '>' or space, so a hostile ID
// can never become a wildcard or split into tokens. The prefix keeps the
// token non-empty for an empty input.
func subjectToken(id string) string {
	return "_" + base64.RawURLEncoding.EncodeToString([]byte(id))
}

func fromSubjectToken(tok string) (string, bool) {
	rest, ok := strings.CutPrefix(tok, "_")
	if !ok {
		return "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	return string(b), err == nil
}

// validateMessage checks everything a sender controls. It is shared by all
// drivers, so both reject the same input with the same error.
func validateMessage(m *Message, requiresSession bool) error {
	if m == nil {
		return invalid("message", "nil")
	}
	if m.MessageID != "" {
		if err := validID("MessageID", m.MessageID); err != nil {
			return err
		}
	}
	if err := validID("SessionID", m.SessionID); err != nil {
		return err
	}
	if requiresSession && m.SessionID == "" {
		return ErrSessionRequired
	}
	if err := validID("PartitionKey", m.PartitionKey); err != nil {
		return err
	}
	if m.PartitionKey != "" && m.SessionID != "" && m.PartitionKey != m.SessionID {
		return invalid("PartitionKey", "%.64q differs from the SessionID %.64q: a session's messages stay in its partition", m.PartitionKey, m.SessionID)
	}
	for _, f := range [...]struct{ name, v string }{
		{"ContentType", m.ContentType},
		{"CorrelationID", m.CorrelationID},
		{"ReplyTo", m.ReplyTo},
		{"Subject", m.Subject},
	} {
		if err := validValue(f.name, f.v); err != nil {
			return err
		}
	}
	if len(m.Properties) > maxPropCount {
		return invalid("Properties", "more than %d", maxPropCount)
	}
	for k, v := range m.Properties {
		if err := validPropKey(k); err != nil {
			return err
		}
		if err := validValue("property "+k, v); err != nil {
			return err
		}
	}
	return nil
}
