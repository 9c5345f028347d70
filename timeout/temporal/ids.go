package temporal

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// maxEscapedID is the longest escaped timeout ID kept readable in a
// workflow ID; longer ones are hashed, so that a workflow ID stays well
// under Temporal's limit (1000 bytes by default) whatever the ID.
const maxEscapedID = 200

// workflowID returns the workflow ID of the timeout (queue, id) on the
// engine named engine: "jetsaga/<engine>/<queue>/<escaped id>", where the
// ID keeps [A-Za-z0-9._-] and escapes every other byte as %XX, or, if
// that is longer than maxEscapedID, "#" and the SHA-256 of the ID in hex.
// The mapping is injective ('%' and '#' are always escaped, so the two
// forms never meet) and its output is plain ASCII without quotes,
// spaces or wildcards, safe in visibility queries.
func workflowID(engine, queue, id string) string {
	return workflowIDPrefix(engine, queue) + escapeID(id)
}

// workflowIDPrefix is what the workflow IDs of one queue's timeouts
// start with.
func workflowIDPrefix(engine, queue string) string {
	return "jetsaga/" + engine + "/" + queue + "/"
}

func escapeID(id string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		}
		if b.Len() > maxEscapedID {
			sum := sha256.Sum256([]byte(id))
			return "#" + hex.EncodeToString(sum[:])
		}
	}
	return b.String()
}

// ref returns the ref of a workflow ID: "<engine>:<queue>/<escaped id>".
func (e *Engine) ref(wid string) timeout.Ref {
	return timeout.Ref(e.cfg.name + ":" + strings.TrimPrefix(wid, "jetsaga/"+e.cfg.name+"/"))
}

// parseRef returns the workflow ID a ref names, or an error matching
// timeout.ErrInvalidRef.
func (e *Engine) parseRef(ref timeout.Ref) (string, error) {
	rest, ok := strings.CutPrefix(string(ref), e.cfg.name+":")
	queue, id, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || id == "" || transport.ValidateQueueName(queue) != nil {
		return "", fmt.Errorf("%w: %q", timeout.ErrInvalidRef, ref)
	}
	return "jetsaga/" + e.cfg.name + "/" + rest, nil
}
