package saga

import (
	"maps"
	"slices"
	"sync"
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
	rec *record // never changed once cached: each step gets a clone
	rev uint64
}

func newRecordCache(max int) *recordCache {
	if max <= 0 {
		return nil
	}
	return &recordCache{max: max, m: make(map[string]cachedRecord)}
}

// get returns a copy of the record cached under key, for a step to change.
func (c *recordCache) get(key string) (*record, uint64, bool) {
	if c == nil {
		return nil, 0, false
	}
	c.mu.Lock()
	e, ok := c.m[key]
	c.mu.Unlock()
	if !ok {
		return nil, 0, false
	}
	return e.rec.clone(), e.rev, true
}

// set caches a copy of rec, stored at rev.
func (c *recordCache) set(key string, rec *record, rev uint64) {
	if c == nil {
		return
	}
	e := cachedRecord{rec: rec.clone(), rev: rev}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; !ok && len(c.m) >= c.max {
		for k := range c.m { // evict one entry, an arbitrary one
			delete(c.m, k)
			break
		}
	}
	c.m[key] = e
}

// carried notes that the outbox of the record cached under key at rev has
// been carried out: rec is that record without it, with the refs of the
// timeouts it scheduled (see carryOutKept).
func (c *recordCache) carried(key string, rev uint64, rec *record) {
	if c == nil {
		return
	}
	cp := rec.clone()
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[key]; ok && e.rev == rev {
		c.m[key] = cachedRecord{rec: cp, rev: rev}
	}
}

// holds reports whether the record cached under key is the one stored at
// rev.
func (c *recordCache) holds(key string, rev uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	return ok && e.rev == rev
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

// clone returns a copy of r that shares nothing it could change: a
// step changes its record's maps and slices in place.
func (r *record) clone() *record {
	c := *r
	c.JSONData = slices.Clone(r.JSONData)
	c.BinData = slices.Clone(r.BinData)
	c.Timeouts = maps.Clone(r.Timeouts)
	c.Inbox = slices.Clone(r.Inbox)
	if r.Outbox != nil {
		c.Outbox = make([]effect, len(r.Outbox))
		for i, e := range r.Outbox {
			if e.Msg != nil {
				m := *e.Msg
				m.Body = slices.Clone(m.Body)
				m.Properties = maps.Clone(m.Properties)
				e.Msg = &m
			}
			c.Outbox[i] = e
		}
	}
	if r.Originator != nil {
		o := *r.Originator
		c.Originator = &o
	}
	return &c
}

// hitRate estimates, over the last few hundred steps that found a record,
// the share for which this dispatcher's cache held the record as stored.
// While at least half did (or too few steps tell), steps start from the
// cache, and a step leaves an outbox of timeouts in the stored record
// (see carryOutKept), which saves the Put that clears it when the next
// step on the instance starts from the cache. When other dispatchers take
// most of the turns on the instances, a cached record is mostly stale (a
// wasted conditional write each) and a kept outbox would cost the next
// step, which loads the record, one schedule call per timeout: then steps
// load, and outboxes are cleared, as in the first design. Steps that load
// keep measuring (does the cache hold the revision loaded?), so the
// dispatcher returns to the cache when the turns come back to it.
type hitRate struct {
	mu          sync.Mutex
	hits, total float64 // decayed counts
}

const hitDecay = 1 - 1.0/256

func (h *hitRate) note(hit bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hits *= hitDecay
	h.total = h.total*hitDecay + 1
	if hit {
		h.hits++
	}
}

// likely reports whether the next step on an instance will probably start
// from the cache: at least half of the recent ones did (or too few steps
// found a record to tell).
func (h *hitRate) likely() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total < 16 || 2*h.hits >= h.total
}
