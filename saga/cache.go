package saga

import (
	"context"
	"errors"
	"sync"
)

// DefaultRecordCache is how many records a dispatcher caches by default
// (see WithRecordCache).
const DefaultRecordCache = 4096

// cachedRecords is the record cache in front of the store: records this
// dispatcher wrote, served to the first attempt of a step (a load that
// may be stale) while they mostly are what the store holds (hitRate).
type cachedRecords struct {
	next  records
	cache *recordCache
	hits  hitRate // of the cache, by the steps that found a record
}

func (c *cachedRecords) load(ctx context.Context, key string, mayBeStale bool) (*record, uint64, bool, error) {
	if mayBeStale && c.hits.likely() {
		// Taken, not copied: a step that commits puts its record back; one
		// that decides otherwise leaves the key to the store until then.
		if rec, rev, ok := c.cache.take(key); ok {
			rec.FromCache = true
			return rec, rev, true, nil
		}
	}
	rec, rev, _, err := c.next.load(ctx, key, false)
	if err == nil && mayBeStale {
		// A step's first load tells whether the cache would have held
		// the record as stored, so that the dispatcher returns to the
		// cache when the turns on the instances come back to it.
		c.hits.note(c.cache.has(key, rev))
	}
	return rec, rev, false, err
}

// commit writes through, and caches the record as written (not a
// completed one, whose step is the instance's last); a commit on a cached
// record tells whether the cache held the record as stored.
func (c *cachedRecords) commit(ctx context.Context, key string, rec *record, rev uint64) (uint64, error) {
	n, err := c.next.commit(ctx, key, rec, rev)
	if rec.FromCache && (err == nil || errors.Is(err, ErrConflict)) {
		rec.FromCache = false // one note per record served
		c.hits.note(err == nil)
	}
	if err != nil || rec.Completed {
		c.cache.forget(key)
	} else {
		c.cache.set(key, rec, n)
	}
	return n, err
}

// keepOutbox keeps the outbox while the next step on the instance
// probably starts from the cache, which then holds rec without it.
func (c *cachedRecords) keepOutbox(key string, rev uint64, rec *record) bool {
	if !c.hits.likely() {
		return false
	}
	c.cache.carried(key, rev, rec)
	return true
}

// recordCache keeps, per store key, the record this dispatcher last wrote
// and the revision the store gave it, so that the next step on the
// instance can skip the load. It is a hint, never a source of truth: a
// step that starts from a cached record commits with the cached revision,
// which the store refuses (ErrConflict) if anyone wrote the record since;
// and any decision that would not end in such a conditional write — a
// duplicate, a dropped timeout, a missing or completed instance, a
// handler error, a pending outbox — is made again on a fresh load (see
// errStale).
//
// A dispatcher whose store is a UnitStore has no cache: its steps load
// in their unit of work (see UnitStore), where a record from the cache
// could cost the handler's own writes a rollback, and WithLocking-style
// stores lock the record as they load it.
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
	return e.rec.Clone(), e.rev, true
}

// set caches a copy of rec, stored at rev.
func (c *recordCache) set(key string, rec *record, rev uint64) {
	if c == nil {
		return
	}
	e := cachedRecord{rec: rec.Clone(), rev: rev}
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
// timeouts it scheduled (see carryOutInMemory).
func (c *recordCache) carried(key string, rev uint64, rec *record) {
	if c == nil {
		return
	}
	cp := rec.Clone()
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[key]; ok && e.rev == rev {
		c.m[key] = cachedRecord{rec: cp, rev: rev}
	}
}

// has reports whether the record cached under key is the one stored at
// rev.
func (c *recordCache) has(key string, rev uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	return ok && e.rev == rev
}

// take returns the record cached under key and forgets it.
func (c *recordCache) take(key string) (*record, uint64, bool) {
	c.mu.Lock()
	e, ok := c.m[key]
	delete(c.m, key)
	c.mu.Unlock()
	if !ok {
		return nil, 0, false
	}
	// The cached record is the step's now; a copy, all the same, so that
	// a record cached once is never changed (see cachedRecord).
	return e.rec.Clone(), e.rev, true
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

// hitRate estimates, over the last few hundred steps that found a record,
// the share for which this dispatcher's cache held the record as stored.
// While at least half did (or too few steps tell), steps start from the
// cache, and a step leaves an outbox of timeouts in the stored record
// (see carryOutInMemory), which saves the Put that clears it when the next
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
