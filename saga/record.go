package saga

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"

	recordfmt "github.com/jetsaga/jetsaga/internal/record"
)

// The record format lives in internal/record, which the benchmarks share
// (see its package documentation for what makes a step all-or-nothing).
type (
	record       = recordfmt.Record
	timeoutEntry = recordfmt.Timeout
	address      = recordfmt.Address
	effect       = recordfmt.Effect
	envelope     = recordfmt.Envelope
)

const (
	effectSend     = recordfmt.EffectSend
	effectPublish  = recordfmt.EffectPublish
	effectSchedule = recordfmt.EffectSchedule
	effectCancel   = recordfmt.EffectCancel
)

// StoreKey returns the key a Store holds the record of an instance of
// saga sagaName under: the name, a dot, and the ID base64url-encoded
// (without padding), so that any ID is a safe key and NATS subject
// token. For tools and tests that read or restore records (golden
// records of an older version, say); what a record holds is the
// dispatcher's own.
func StoreKey(sagaName, id string) string { return storeKey(sagaName, id) }

// storeKey makes a Store key from saga name and instance ID. The ID is
// base64url-encoded, so any ID is a safe key and NATS subject token.
func storeKey(sagaName, id string) string {
	return sagaName + "." + base64.RawURLEncoding.EncodeToString([]byte(id))
}

// effectID derives the ID of the n-th effect of a step from the saga
// instance and the incoming message's identity: stable across re-runs of
// the same committed step.
func effectID(key, incoming string, n int) string {
	h := sha256.Sum256([]byte(key + "\x00" + incoming + "\x00" + strconv.Itoa(n)))
	return hex.EncodeToString(h[:16])
}
