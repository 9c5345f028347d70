package saga

import (
	"sync"

	"github.com/jetsaga/jetsaga/timeout"
)

// DefaultRecordCache is how many records a dispatcher caches by default
// (see WithRecordCache).
const DefaultRecordCache = 4096

// recordCache keeps, per store key, the record this dispatcher last wrote
// and the revision the store gave it, so that the next step on the
// instance can skip the load. It is a hint, never a source of truth: a
// step that starts from a cached record commits with the cached revision,
// which the store refuses (ErrConflict) if anyone wrote the record since;
// and any decision that would not end in such a conditional write — a
// duplicate, a dropped timeout, a missing or completed instance, a
// handler error, a pending outbox — is made again on a fresh load (see
// errStaleCache).
//
// This needs revisions that never come back for a key: a record deleted
// (or expired) and written again must not reach a revision it had before.
// kvstore (stream sequences) and memstore (one counter) guarantee it.
type recordCache struct {
	mu  sync.Mutex
	max int
	m   map[string]cachedRecord
}

type cachedRecord struct {
	raw []byte // as encoded for the store; decoded afresh for each step
	rev uint64
	// carried: raw's outbox (timeouts only) was carried out, with these
	// refs; a step from this entry starts without it (see carryOutKept).
	carried bool
	refs    map[string]timeout.Ref
}

func newRecordCache(max int) *recordCache {
	if max <= 0 {
		return nil
	}
	return &recordCache{max: max, m: make(map[string]cachedRecord)}
}

func (c *recordCache) get(key string) (cachedRecord, bool) {
	if c == nil {
		return cachedRecord{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[key]
	return r, ok
}

func (c *recordCache) set(key string, raw []byte, rev uint64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; !ok && len(c.m) >= c.max {
		for k := range c.m { // evict one entry, an arbitrary one
			delete(c.m, k)
			break
		}
	}
	c.m[key] = cachedRecord{raw: raw, rev: rev}
}

// carried notes that the outbox of the record cached under key at rev has
// been carried out, rec being that record without it.
func (c *recordCache) carried(key string, rev uint64, rec *record) {
	if c == nil {
		return
	}
	refs := make(map[string]timeout.Ref, len(rec.Timeouts))
	for tok, te := range rec.Timeouts {
		if te.Ref != "" {
			refs[tok] = te.Ref
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[key]; ok && e.rev == rev {
		e.carried, e.refs = true, refs
		c.m[key] = e
	}
}

// record decodes a cached entry as a step starts from it.
func (e cachedRecord) record() (*record, error) {
	rec, err := decodeRecord(e.raw)
	if err != nil || !e.carried {
		return rec, err
	}
	rec.Outbox = nil
	for tok, ref := range e.refs {
		if te, ok := rec.Timeouts[tok]; ok {
			te.Ref = ref
			rec.Timeouts[tok] = te
		}
	}
	return rec, nil
}

func (c *recordCache) forget(key string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
}

func (c *recordCache) len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
