package saga

import (
	"context"
	"fmt"
)

// Loading and committing records, and keeping the record cache in step
// with what this dispatcher wrote.

// load returns the record stored under key and its revision, or
// ErrNotFound.
func (d *Dispatcher) load(ctx context.Context, key string) (*record, uint64, error) {
	raw, rev, err := d.store.Load(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	rec, err := decodeRecord(raw)
	if err != nil {
		return nil, 0, Permanent(fmt.Errorf("saga: stored record %s unreadable: %w", key, err))
	}
	return rec, rev, nil
}

// put stores rec under key if its revision is rev. A completed instance's
// record expires after the retention, if the store can let it.
//
// It keeps the record cache in step: the record as written (if it is not
// completed) after a successful write, nothing after a failed one.
func (d *Dispatcher) put(ctx context.Context, key string, rec *record, rev uint64) (uint64, error) {
	b, err := encodeRecord(rec)
	if err != nil {
		d.cache.forget(key)
		return 0, err
	}
	var n uint64
	if es, ok := d.store.(ExpiringStore); ok && rec.Completed {
		n, err = es.PutTTL(ctx, key, b, rev, d.cfg.retention)
	} else {
		n, err = d.store.Put(ctx, key, b, rev)
	}
	if err != nil || rec.Completed {
		d.cache.forget(key)
	} else {
		d.cache.set(key, rec, n)
	}
	return n, err
}

// loadStep returns the record a step starts from: the cached one if
// useCache and there is one (cached reports it), else the stored one.
//
// If note, it tells d.hits whether the cache held the stored record: at
// once for a record loaded, at the commit (attempt) for a cached one.
func (d *Dispatcher) loadStep(ctx context.Context, key string, useCache, note bool) (rec *record, rev uint64, cached bool, err error) {
	if useCache {
		if rec, rev, ok := d.cache.get(key); ok {
			return rec, rev, true, nil
		}
	}
	rec, rev, err = d.load(ctx, key)
	if note && err == nil && d.cache != nil {
		d.hits.note(d.cache.holds(key, rev))
	}
	return rec, rev, false, err
}
