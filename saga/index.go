package saga

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	recordfmt "github.com/jetsaga/jetsaga/internal/record"
	"github.com/jetsaga/jetsaga/transport"
)

// Indexes: values of a saga's data that find its instances (Find) and
// correlate messages to them (ByIndex). See docs/indexes.md.
//
// How entries move with the record, on any Store: an instance's values
// are kept in its record (record.Index), and each value has an entry, a
// key of its own in the same Store, written before the record by the
// commit that adds the value. The record is the truth: a read takes an
// entry only if the record it names holds the value, so an entry written
// by a step that then failed or died is never taken, and a value a record
// holds always has its entry, written before it. An entry carries the
// revision of the record it was written against (claim): once the record
// has moved past it without the value, the entry is stale and a read
// deletes it (by the entry's own revision, so that it never deletes an
// entry written again since). On a UnitStore (saga/pgstore) the entries
// are written in the step's unit and commit with the record.

// Limits of indexes and their values.
const (
	// MaxIndexValueLen is the longest index value, in bytes of UTF-8.
	MaxIndexValueLen = 256
	// MaxIndexValues is the most values one index may give for one
	// instance.
	MaxIndexValues = 32
	// MaxIndexes is the most indexes a saga may declare.
	MaxIndexes = 16
	// IndexClaimGrace is how long an entry written by a step whose record
	// has not moved since (the step still committing, or dead before its
	// commit) keeps its value from another instance of a unique index.
	// After it, the entry is stale: a step that died between writing the
	// entry and the record frees the value after IndexClaimGrace.
	IndexClaimGrace = 2 * time.Minute
)

var (
	// ErrInvalidIndex is returned for an index that cannot be declared
	// or queried: a name that is not 1–64 characters of [A-Za-z0-9_-], a
	// name declared twice, more than MaxIndexes, or a name the saga does
	// not declare.
	ErrInvalidIndex = errors.New("saga: invalid index")
	// ErrInvalidIndexValue is returned for an index value that is not
	// 1–MaxIndexValueLen bytes of UTF-8 without control characters, for
	// an index function that gives more than MaxIndexValues values, and
	// for one that panics. A step whose data gives one fails with a
	// Permanent error (dead-lettered, ReasonPermanent).
	ErrInvalidIndexValue = errors.New("saga: invalid index value")
	// ErrIndexValueTaken fails a step (Permanent) whose data gives a
	// unique index a value that another live instance holds.
	ErrIndexValueTaken = errors.New("saga: unique index value held by another instance")
	// ErrAmbiguousIndex fails (Permanent) a message correlated by a
	// non-unique index (ByIndex) whose value several live instances
	// hold: it is dead-lettered with ReasonPermanent and this error.
	ErrAmbiguousIndex = errors.New("saga: several instances hold the index value")
	// ErrIndexBuilding is yielded by Find, after the instances found,
	// while the index is being rebuilt (Dispatcher.Reindex has started
	// and not finished): instances written before the index existed may
	// be missing.
	ErrIndexBuilding = errors.New("saga: index is being built")

	// errIndexPending fails (not for good) a message correlated by an
	// index whose value only a step not committed yet claims.
	errIndexPending = errors.New("saga: index value claimed by a step not committed yet")
)

// IndexOption configures an index.
type IndexOption interface{ applyIndex(*indexSpec) }

type indexOptionFunc func(*indexSpec)

func (f indexOptionFunc) applyIndex(s *indexSpec) { f(s) }

// Unique makes the index unique: no two live (not completed) instances
// hold the same value. A step that gives a value another live instance
// holds fails with ErrIndexValueTaken; a starting message correlated by
// the index (ByIndex) reaches the instance that holds its value, so that
// two starts with the same value, from any processes, make one instance.
func Unique() IndexOption { return indexOptionFunc(func(s *indexSpec) { s.unique = true }) }

type indexSpec struct {
	name   string
	unique bool
}

// index is a declared index of a saga with data S.
type index[S any] struct {
	indexSpec
	values func(S) []string
}

// Index declares an index of saga d: value gives an instance's value
// after each step ("" for none). Declare indexes with the saga, before it
// is registered. Values are compared as bytes.
func Index[S any](d *Definition[S], name string, value func(data S) string, opts ...IndexOption) {
	IndexValues(d, name, func(data S) []string {
		if v := value(data); v != "" {
			return []string{v}
		}
		return nil
	}, opts...)
}

// IndexValues declares an index of saga d whose instances may hold
// several values (up to MaxIndexValues; "" values are left out): a
// non-unique index finds an instance by any of them; a unique one keeps
// each value to one instance.
func IndexValues[S any](d *Definition[S], name string, values func(data S) []string, opts ...IndexOption) {
	ix := index[S]{indexSpec: indexSpec{name: name}, values: values}
	for _, o := range opts {
		o.applyIndex(&ix.indexSpec)
	}
	var err error
	switch {
	case validateIndexName(name) != nil:
		err = validateIndexName(name)
	case slices.ContainsFunc(d.indexes, func(o index[S]) bool { return o.name == name }):
		err = fmt.Errorf("%w: %q declared twice", ErrInvalidIndex, name)
	case len(d.indexes) >= MaxIndexes:
		err = fmt.Errorf("%w: more than %d indexes", ErrInvalidIndex, MaxIndexes)
	case values == nil:
		err = fmt.Errorf("%w: %q has no function", ErrInvalidIndex, name)
	}
	if err != nil {
		if d.err == nil {
			d.err = fmt.Errorf("%w: saga %s: %w", ErrInvalidDefinition, d.name, err)
		}
		return
	}
	d.indexes = append(d.indexes, ix)
}

func validateIndexName(name string) error {
	if transport.ValidateQueueName(name) != nil {
		return fmt.Errorf("%w: name %.64q: 1-64 characters of [A-Za-z0-9_-]", ErrInvalidIndex, name)
	}
	return nil
}

// ValidateIndexValue reports whether v can be an index value:
// 1–MaxIndexValueLen bytes of UTF-8 without control characters. The error
// matches ErrInvalidIndexValue.
func ValidateIndexValue(v string) error {
	if v == "" || len(v) > MaxIndexValueLen || !utf8.ValidString(v) {
		return fmt.Errorf("%w: %.64q: must be 1-%d bytes of UTF-8", ErrInvalidIndexValue, v, MaxIndexValueLen)
	}
	for _, r := range v {
		if r < 0x20 || r >= 0x7f && r <= 0x9f {
			return fmt.Errorf("%w: %.64q: contains control character %U", ErrInvalidIndexValue, v, r)
		}
	}
	return nil
}

// indexed is the view of a Definition's indexes the dispatcher uses.
type indexed interface {
	indexSpecs() []indexSpec
}

func (d *Definition[S]) indexSpecs() []indexSpec {
	out := make([]indexSpec, len(d.indexes))
	for i, ix := range d.indexes {
		out[i] = ix.indexSpec
	}
	return out
}

func specOf(rt sagaRuntime, name string) (indexSpec, bool) {
	ix, ok := rt.(indexed)
	if !ok {
		return indexSpec{}, false
	}
	for _, s := range ix.indexSpecs() {
		if s.name == name {
			return s, true
		}
	}
	return indexSpec{}, false
}

// setIndex computes the indexes of data after a step into rec: its
// values (Index) and those the step added (IndexNew), whose entries the
// commit writes before the record.
func (d *Definition[S]) setIndex(rec *record, data S) (err error) {
	if len(d.indexes) == 0 {
		rec.Index, rec.IndexNew = nil, nil // values of indexes no longer declared
		return nil
	}
	before := rec.Index
	rec.Index, rec.IndexNew = make(map[string][]string, len(d.indexes)), nil
	for _, ix := range d.indexes {
		vals, err := indexValues(ix, data)
		if err != nil {
			return Permanent(fmt.Errorf("saga %s: index %s: %w", d.name, ix.name, err))
		}
		if len(vals) == 0 {
			continue
		}
		rec.Index[ix.name] = vals
		for _, v := range vals {
			if !slices.Contains(before[ix.name], v) {
				if rec.IndexNew == nil {
					rec.IndexNew = make(map[string][]string)
				}
				rec.IndexNew[ix.name] = append(rec.IndexNew[ix.name], v)
			}
		}
	}
	if len(rec.Index) == 0 {
		rec.Index = nil
	}
	return nil
}

// indexValues calls an index function: its values, sorted, without
// duplicates and "", or an error matching ErrInvalidIndexValue.
func indexValues[S any](ix index[S], data S) (vals []string, err error) {
	defer func() {
		if p := recover(); p != nil {
			vals, err = nil, fmt.Errorf("%w: the index function panicked: %v", ErrInvalidIndexValue, p)
		}
	}()
	raw := ix.values(data)
	vals = make([]string, 0, len(raw))
	for _, v := range raw {
		if v == "" {
			continue
		}
		if err := ValidateIndexValue(v); err != nil {
			return nil, err
		}
		vals = append(vals, v)
	}
	slices.Sort(vals)
	vals = slices.Compact(vals)
	if len(vals) > MaxIndexValues {
		return nil, fmt.Errorf("%w: %d values, at most %d", ErrInvalidIndexValue, len(vals), MaxIndexValues)
	}
	return vals, nil
}

// IndexKeyPrefix starts the keys of index entries in a Store, beside the
// records ("NAME.ID"): no saga's name has its "=", so listing a saga's
// records never lists them.
//
//	=ix.SAGA.INDEX.VALUE        unique: the entry names the holder
//	=ix.SAGA.INDEX.VALUE.ID     not unique: one entry per instance
//	=ixb.SAGA.INDEX             the state of a rebuild (Reindex)
//
// VALUE and ID are base64url without padding: any value is a safe key
// and NATS subject token.
const IndexKeyPrefix = "=ix."

func enc(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func uniqueKey(sagaName, name, value string) string {
	return IndexKeyPrefix + sagaName + "." + name + "." + enc(value)
}

func entriesPrefix(sagaName, name, value string) string {
	return uniqueKey(sagaName, name, value) + "."
}

func entryKey(sagaName, name, value, id string) string {
	return entriesPrefix(sagaName, name, value) + enc(id)
}

func buildKey(sagaName, name string) string { return "=ixb." + sagaName + "." + name }

// indexEntry is an entry's value.
type indexEntry struct {
	ID  string `json:"id,omitempty"` // the holder (unique indexes)
	Rev uint64 `json:"rev"`          // the record's revision the entry was written against
	At  int64  `json:"at"`           // when, Unix milliseconds
}

// indexer writes and checks a dispatcher's index entries.
type indexer struct {
	store Store
	now   func() time.Time
}

// entryState is what a read makes of an entry.
type entryState int

const (
	entryLive    entryState = iota + 1 // the record holds the value
	entryPending                       // written by a step not committed yet (within IndexClaimGrace)
	entryStale                         // the record moved on without the value, or is gone
)

// check compares an entry for value of index name with the record of
// its instance: live, pending, or stale.
func (x indexer) check(ctx context.Context, sagaName, name, value, id string, e indexEntry) (entryState, error) {
	raw, rev, err := x.store.Load(ctx, storeKey(sagaName, id))
	var rec *record
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return 0, err
	default:
		if rec, err = decodeRecord(raw); err != nil {
			return 0, err
		}
		if !rec.Completed && slices.Contains(rec.Index[name], value) {
			return entryLive, nil
		}
	}
	if rev > e.Rev || rec == nil && e.Rev > 0 {
		return entryStale, nil // moved on without it, or completed and gone
	}
	if x.now().Sub(time.UnixMilli(e.At)) > IndexClaimGrace {
		return entryStale, nil
	}
	return entryPending, nil
}

func decodeRecord(raw []byte) (*record, error) {
	rec, err := recordfmt.Decode(raw)
	if err != nil {
		return nil, fmt.Errorf("saga: stored record unreadable: %w", err)
	}
	return rec, nil
}

// loadEntry loads an entry: its value and revision, or ErrNotFound.
func (x indexer) loadEntry(ctx context.Context, key string) (indexEntry, uint64, error) {
	raw, rev, err := x.store.Load(ctx, key)
	if err != nil {
		return indexEntry{}, 0, err
	}
	var e indexEntry
	if err := json.Unmarshal(raw, &e); err != nil {
		return indexEntry{}, 0, fmt.Errorf("saga: index entry %s unreadable: %w", key, err)
	}
	return e, rev, nil
}

func (x indexer) putEntry(ctx context.Context, key string, e indexEntry, rev uint64) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	_, err = x.store.Put(ctx, key, b, rev)
	return err
}

// maxEntryTries bounds the writes of one entry that race with readers
// deleting it or writers replacing it.
const maxEntryTries = 8

// write writes the entry of value for instance id of an index, against
// the record's revision rev, before the record's commit. A unique index's
// entry is taken over only from a stale holder; a live one fails it with
// ErrIndexValueTaken, a pending one with ErrConflict (the step runs again
// on fresh state, by which time the holder has committed or not).
//
// In a unit (inUnit), it reads the entry first and writes it once: a
// statement that fails may end the unit's transaction (PostgreSQL), and a
// race with another writer fails the unit's commit instead, which runs
// the step again.
func (x indexer) write(ctx context.Context, sagaName string, spec indexSpec, value, id string, rev uint64, inUnit bool) error {
	key, e := x.entryFor(sagaName, spec, value, id, rev)
	for range maxEntryTries {
		if !inUnit {
			// Most values are new: create the entry, and read it
			// only if it is there.
			err := x.putEntry(ctx, key, e, 0)
			if !errors.Is(err, ErrConflict) {
				return err
			}
		}
		old, erev, err := x.loadEntry(ctx, key)
		switch {
		case errors.Is(err, ErrNotFound):
			if !inUnit {
				continue // deleted meanwhile
			}
			erev = 0
		case err != nil:
			return err
		case spec.unique && old.ID != id:
			st, err := x.check(ctx, sagaName, spec.name, value, old.ID, old)
			if err != nil {
				return err
			}
			switch st {
			case entryLive:
				return Permanent(fmt.Errorf("%w: saga %s: index %s: %.64q held by %.64q", ErrIndexValueTaken, sagaName, spec.name, value, old.ID))
			case entryPending:
				return fmt.Errorf("%w: saga %s: index %s: %.64q claimed by %.64q, not committed yet", ErrConflict, sagaName, spec.name, value, old.ID)
			}
		}
		err = x.putEntry(ctx, key, e, erev)
		if inUnit || !errors.Is(err, ErrConflict) && !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	return fmt.Errorf("%w: saga %s: index %s: entry for %.64q kept changing", ErrConflict, sagaName, spec.name, value)
}

// create writes the entry of value for instance id of an index, against
// the record's revision rev, in the step's unit, without reading it: it
// creates it, and a store refuses the create (ErrConflict), at once or at
// the unit's commit, if there is an entry (see createdEntries).
func (x indexer) create(ctx context.Context, sagaName string, spec indexSpec, value, id string, rev uint64) error {
	key, e := x.entryFor(sagaName, spec, value, id, rev)
	return x.putEntry(ctx, key, e, 0)
}

// entryFor returns the key and value of the entry of value for instance
// id of an index, written against the record's revision rev.
func (x indexer) entryFor(sagaName string, spec indexSpec, value, id string, rev uint64) (string, indexEntry) {
	e := indexEntry{Rev: rev, At: x.now().UnixMilli()}
	if spec.unique {
		e.ID = id
		return uniqueKey(sagaName, spec.name, value), e
	}
	return entryKey(sagaName, spec.name, value, id), e
}

// lookup returns the IDs of the instances whose entries for value of
// index name are live, and of those whose entries are pending, each in ID
// order; it deletes the stale entries it reads.
func (x indexer) lookup(ctx context.Context, sagaName string, spec indexSpec, value string) (ids, pending []string, err error) {
	name := spec.name
	cands, err := x.candidates(ctx, sagaName, name, value, spec.unique)
	if err != nil {
		return nil, nil, err
	}
	for _, c := range cands {
		switch st, err := x.settle(ctx, sagaName, name, value, c); {
		case err != nil:
			return nil, nil, err
		case st == entryLive:
			ids = append(ids, c.id)
		case st == entryPending:
			pending = append(pending, c.id)
		}
	}
	return slices.Compact(ids), slices.Compact(pending), nil
}

// candidate is an instance an entry names, not checked yet.
type candidate struct {
	id, key string
	e       *indexEntry // the entry, if read (a unique index's is)
	erev    uint64
}

// candidates returns the instances the entries for value of index name
// name, in ID order, without reading their records: the one a unique
// index's entry names (read), and those of the entries listed under the
// value's prefix (not read), unless the index is known to be unique.
func (x indexer) candidates(ctx context.Context, sagaName, name, value string, unique bool) ([]candidate, error) {
	var cands []candidate
	ukey := uniqueKey(sagaName, name, value)
	e, erev, err := x.loadEntry(ctx, ukey)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return nil, err
	default:
		cands = append(cands, candidate{id: e.ID, key: ukey, e: &e, erev: erev})
	}
	ls, ok := x.store.(ListingStore)
	if !ok || unique {
		return cands, nil // a unique index needs no listing
	}
	prefix := entriesPrefix(sagaName, name, value)
	for k, err := range ls.ListKeys(ctx, prefix) {
		if err != nil {
			return nil, err
		}
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(k, prefix))
		if err != nil || strings.Contains(k[len(prefix):], ".") {
			continue
		}
		cands = append(cands, candidate{id: string(raw), key: k})
	}
	slices.SortStableFunc(cands, func(a, b candidate) int { return strings.Compare(a.id, b.id) })
	return cands, nil
}

// settle checks candidate c's entry against its record: live, pending,
// or stale (deleted), or 0 if the entry is gone.
func (x indexer) settle(ctx context.Context, sagaName, name, value string, c candidate) (entryState, error) {
	e, erev := c.e, c.erev
	if e == nil {
		le, lrev, err := x.loadEntry(ctx, c.key)
		if errors.Is(err, ErrNotFound) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		e, erev = &le, lrev
	}
	st, err := x.check(ctx, sagaName, name, value, c.id, *e)
	if err != nil {
		return 0, err
	}
	if st == entryStale {
		// Only this version of it: one written since is a claim of its
		// own. Cleaning up is best effort: a stale entry is never taken
		// anyway (and a read-only store refuses).
		_ = x.store.Delete(ctx, c.key, erev)
	}
	return st, nil
}

// indexedRecords are records whose commits write the index entries of
// the values a step added (record.IndexNew) before the record; on a
// UnitStore, in the step's unit, after it (they commit together). It
// sits in front of every other records.
type indexedRecords struct {
	records
	ix     indexer
	byName map[string]sagaRuntime
	units  bool // steps commit in a unit of the store (UnitStore)
	// created, in a dispatcher whose steps commit in units, picks the
	// steps that create their entries unread.
	created *createdEntries
}

func (r indexedRecords) commit(ctx context.Context, key string, rec *record, rev uint64) (uint64, error) {
	if rec.Completed {
		rec.Index, rec.IndexNew = nil, nil // a completed instance leaves its indexes
	}
	if len(rec.IndexNew) == 0 {
		return r.records.commit(ctx, key, rec, rev)
	}
	if !r.units {
		if err := r.writeEntries(ctx, key, rec, rev, entriesFirst); err != nil {
			return 0, err
		}
	}
	n, err := r.records.commit(ctx, key, rec, rev)
	if err != nil {
		return 0, err
	}
	if r.units {
		// A step's commit in its unit: the record and the entries
		// commit together, and the record's write goes first, so that
		// the store may hold it for the unit's commit (saga/pgstore
		// does, and the entries' creates with it: no round trip).
		mode := entriesInUnit
		if r.created != nil && r.created.try(key, rev) {
			mode = entriesCreated
		}
		if err := r.writeEntries(ctx, key, rec, rev, mode); err != nil {
			return 0, err
		}
	}
	rec.IndexNew = nil
	return n, nil
}

// entriesMode is how a commit writes the entries of the values its
// record adds.
type entriesMode int

const (
	entriesFirst   entriesMode = iota // before the record, each on its own (indexer.write)
	entriesInUnit                     // in the step's unit, each read first (indexer.write)
	entriesCreated                    // in the step's unit, created unread (indexer.create)
)

// writeEntries writes the entries of the values rec adds.
func (r indexedRecords) writeEntries(ctx context.Context, key string, rec *record, rev uint64, mode entriesMode) error {
	sagaName, encID, _ := strings.Cut(key, ".")
	id, err := base64.RawURLEncoding.DecodeString(encID)
	rt := r.byName[sagaName]
	if err != nil || rt == nil {
		return fmt.Errorf("saga: indexing %s: not an instance of a saga this dispatcher runs", key)
	}
	for _, name := range slices.Sorted(maps.Keys(rec.IndexNew)) {
		spec, ok := specOf(rt, name)
		if !ok {
			continue
		}
		for _, v := range rec.IndexNew[name] {
			if mode == entriesCreated {
				err = r.ix.create(ctx, sagaName, spec, v, string(id), rev)
			} else {
				err = r.ix.write(ctx, sagaName, spec, v, string(id), rev, mode == entriesInUnit)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// createdEntries decides which steps in a unit create their entries
// without reading them (indexer.create): most values a step adds have no
// entry yet, and creates that a store holds for the unit's commit (as
// saga/pgstore does) cost no round trip. A create that finds an entry
// (a value taken again, a stale entry, a claim, another holder) fails
// the unit's commit with a conflict, and the step runs again from the
// same revision of its record: that run reads the entries first
// (indexer.write), which tells a stale entry from a live holder. It notes
// the record's key and revision of each step that created, and forgets
// the oldest notes beyond maxCreatedNotes.
type createdEntries struct {
	mu    sync.Mutex
	at    map[string]uint64
	order []string
}

const maxCreatedNotes = 4096

func newCreatedEntries() *createdEntries {
	return &createdEntries{at: make(map[string]uint64)}
}

// try reports whether the commit of key at rev may create its entries
// unread: not if a commit created them at the same revision before (it
// did not commit, or the record would have moved on).
func (c *createdEntries) try(key string, rev uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if at, ok := c.at[key]; ok {
		if at == rev {
			delete(c.at, key)
			return false
		}
		c.at[key] = rev
		return true
	}
	for len(c.at) >= maxCreatedNotes && len(c.order) > 0 {
		delete(c.at, c.order[0])
		c.order = c.order[1:]
	}
	if len(c.order) >= 2*maxCreatedNotes {
		c.order = slices.DeleteFunc(c.order, func(k string) bool { _, ok := c.at[k]; return !ok })
	}
	c.at[key] = rev
	c.order = append(c.order, key)
	return true
}

// readFirst notes that the commit of key at rev must read its entries
// first: a claim (ByIndex) wrote one already.
func (c *createdEntries) readFirst(key string, rev uint64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.at[key]; !ok {
		c.order = append(c.order, key)
	}
	c.at[key] = rev
}

// Query selects instances by an index value: Where makes one.
type Query struct {
	index, value string
	after        string
	limit        int
}

// Where selects the instances whose index name holds value.
func Where(name, value string) Query { return Query{index: name, value: value} }

// After resumes a query after the instance ID id (a page's last).
func (q Query) After(id string) Query { q.after = id; return q }

// Limit stops a query after n instances (0: no limit).
func (q Query) Limit(n int) Query { q.limit = max(n, 0); return q }

func (q Query) validate() error {
	if err := validateIndexName(q.index); err != nil {
		return err
	}
	return ValidateIndexValue(q.value)
}

// Find yields the instances of saga s whose index holds the query's
// value, in index order (by instance ID for one value), with their state,
// status and pending timeouts, as Dispatcher.Find does. It checks that s
// declares the index (ErrInvalidIndex otherwise).
func Find(ctx context.Context, d *Dispatcher, s Saga, q Query) iter.Seq2[*Instance, error] {
	if _, ok := specOf(s.runtime(), q.index); !ok {
		return func(yield func(*Instance, error) bool) {
			yield(nil, fmt.Errorf("%w: saga %s declares no index %.64q", ErrInvalidIndex, s.Name(), q.index))
		}
	}
	return d.Find(ctx, s.Name(), q)
}

// Find yields the live instances of saga sagaName whose index holds the
// query's value, in index order (by instance ID for one value), from
// after the query's After, up to its Limit. Completed instances have left
// their indexes (their tombstones are not found). An entry is taken only
// if the instance's record holds the value, and stale entries it meets
// are deleted. A query with an invalid name or value yields an error
// matching ErrInvalidIndex or ErrInvalidIndexValue; while the index is
// being rebuilt (Reindex), the instances found are followed by an error
// matching ErrIndexBuilding.
//
// It lists the entries of the value (one key for a unique index, a key
// listing otherwise) and reads the record of each instance they name, one
// at a time, from after the query's After until it has yielded Limit: a
// page costs the listing and a read per instance of the page.
func (d *Dispatcher) Find(ctx context.Context, sagaName string, q Query) iter.Seq2[*Instance, error] {
	return func(yield func(*Instance, error) bool) {
		if err := q.validate(); err != nil {
			yield(nil, err)
			return
		}
		x := d.indexer()
		spec, _ := specOf(d.byName[sagaName], q.index)
		cands, err := x.candidates(ctx, sagaName, q.index, q.value, spec.unique)
		if err != nil {
			yield(nil, fmt.Errorf("saga: finding %s by %s: %w", sagaName, q.index, err))
			return
		}
		n := 0
		for i, c := range cands {
			id := c.id
			if i > 0 && cands[i-1].id == id || q.after != "" && id <= q.after {
				continue
			}
			if q.limit > 0 && n == q.limit {
				break
			}
			inst, rec, err := d.instance(ctx, sagaName, id)
			if err != nil && !errors.Is(err, ErrNotFound) {
				if !yield(nil, err) {
					return
				}
				continue
			}
			if err != nil || rec.Completed || !slices.Contains(rec.Index[q.index], q.value) {
				// A stale entry, or a step's not committed yet: the
				// check tells, and deletes a stale one.
				if _, err := x.settle(ctx, sagaName, q.index, q.value, c); err != nil && !yield(nil, err) {
					return
				}
				continue
			}
			n++
			if !yield(inst, nil) {
				return
			}
		}
		if b, err := x.building(ctx, sagaName, q.index); err != nil || b {
			if err == nil {
				err = fmt.Errorf("%w: saga %s: index %s", ErrIndexBuilding, sagaName, q.index)
			}
			yield(nil, err)
		}
	}
}

// Lookup returns the IDs of the live instances of saga sagaName in store
// whose index holds the query's value, in ID order, after the query's
// After and up to its Limit, as Find finds them, for tools that read a
// store without a dispatcher (the jetsaga command). It returns the IDs
// with an error matching ErrIndexBuilding while the index is being
// rebuilt, and an error matching ErrInvalidIndex or ErrInvalidIndexValue
// for a bad query. It deletes the stale entries it reads.
func Lookup(ctx context.Context, store Store, sagaName string, q Query) ([]string, error) {
	if err := q.validate(); err != nil {
		return nil, err
	}
	x := indexer{store: store, now: time.Now}
	cands, err := x.candidates(ctx, sagaName, q.index, q.value, false)
	var ids []string
	for _, c := range cands {
		if err != nil || q.limit > 0 && len(ids) == q.limit {
			break
		}
		if q.after != "" && c.id <= q.after || len(ids) > 0 && ids[len(ids)-1] == c.id {
			continue
		}
		var st entryState
		if st, err = x.settle(ctx, sagaName, q.index, q.value, c); st == entryLive {
			ids = append(ids, c.id)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("saga: finding %s by %s: %w", sagaName, q.index, err)
	}
	b, err := x.building(ctx, sagaName, q.index)
	if err != nil {
		return ids, err
	}
	if b {
		return ids, fmt.Errorf("%w: saga %s: index %s", ErrIndexBuilding, sagaName, q.index)
	}
	return ids, nil
}

func (d *Dispatcher) indexer() indexer {
	return indexer{store: d.store, now: d.cfg.now}
}

// ByIndex returns a Finder that correlates a message to the instance of
// saga d whose index name holds the value value gives for the message.
//
// On a unique index, a starting message (StartedBy) whose value no live
// instance holds claims it for a new instance, so that a second start
// with the same value, from any process, reaches that instance. A
// handled message (Handles) whose value no live instance holds goes to
// the saga's NotFoundPolicy, with the ID "∅index:NAME=VALUE". On an
// index that is not unique, a value that several live instances hold
// fails the message with ErrAmbiguousIndex (Permanent: dead-lettered).
// A value that is not valid (ValidateIndexValue), or a name d does not
// declare, fails it with a Permanent error matching ErrInvalidIndexValue
// or ErrInvalidIndex.
//
// On a unique index, a handled message costs one read of the entry: the
// step checks, on the record it loads (cached or not), that the instance
// holds the value, and commits on that revision; if it does not, the
// message is looked up in full. A starting message, and any message on an
// index that is not unique, is looked up in full: the entry (or a listing
// and a read per entry) and the record of each instance named.
func ByIndex[S, M any](d *Definition[S], name string, value func(m M) string) Finder[M] {
	return func(ctx context.Context, m M) (string, error) {
		in, _ := ctx.(*incomingCtx)
		if in == nil || in.d == nil {
			return "", fmt.Errorf("saga %s: ByIndex(%s): %w: it correlates only in a dispatcher", d.name, name, errors.ErrUnsupported)
		}
		spec, ok := specOf(d, name)
		if !ok {
			return "", Permanent(fmt.Errorf("%w: saga %s declares no index %.64q", ErrInvalidIndex, d.name, name))
		}
		v, err := callValue(value, m)
		if err == nil {
			err = ValidateIndexValue(v)
		}
		if err != nil {
			return "", Permanent(fmt.Errorf("saga %s: ByIndex(%s): %w", d.name, name, err))
		}
		ix := in.d.indexer()
		start := in.kind == routeStart
		if spec.unique && !start && !in.lookUp {
			// The entry names the instance; the step checks, on the
			// record it loads, that it holds the value (indexCheck).
			e, _, err := ix.loadEntry(in.Context, uniqueKey(d.name, name, v))
			if err == nil && validateID(e.ID) == nil {
				in.check = &indexCheck{name: name, value: v}
				return e.ID, nil
			}
			if !errors.Is(err, ErrNotFound) && err != nil {
				return "", err
			}
		}
		ids, pending, err := ix.lookup(in.Context, d.name, spec, v)
		if err != nil {
			return "", err
		}
		if start {
			ids = append(ids, pending...) // a start reaches a claim in progress
		} else if len(ids) == 0 && len(pending) > 0 {
			// The holder's step has not committed yet: wait for it
			// (retried), rather than take the message for lost.
			return "", fmt.Errorf("saga %s: index %s: %.64q claimed by a step not committed yet: %w", d.name, name, v, errIndexPending)
		}
		slices.Sort(ids)
		ids = slices.Compact(ids)
		switch {
		case len(ids) == 1:
			return ids[0], nil
		case len(ids) > 1:
			return "", Permanent(fmt.Errorf("%w: saga %s: index %s: %.64q held by %d instances", ErrAmbiguousIndex, d.name, name, v, len(ids)))
		case !start:
			return "∅index:" + name + "=" + v, nil
		case !spec.unique:
			return rand.Text(), nil
		}
		id, err := ix.claim(in.Context, d.name, name, v)
		if r, ok := in.d.records.(indexedRecords); ok && err == nil {
			r.created.readFirst(storeKey(d.name, id), 0) // its entry is written
		}
		return id, err
	}
}

// indexCheck is the index value an instance correlated by its entry
// alone (ByIndex on a unique index) must hold: the step checks it on the
// record it loads, and commits on that record's revision, so that the
// message reaches the instance only if it held the value when the step
// committed. One that does not hold it fails the attempt with
// errIndexMoved, and the message is correlated again by a full lookup.
type indexCheck struct{ name, value string }

// errIndexMoved: the instance an index entry named does not hold the
// value (see indexCheck).
var errIndexMoved = errors.New("saga: the instance an index entry names does not hold the value")

// heldBy reports whether rec, live, holds the value; a nil check holds
// for any record.
func (c *indexCheck) heldBy(rec *record) bool {
	return c == nil || !rec.Completed && slices.Contains(rec.Index[c.name], c.value)
}

func callValue[M any](value func(M) string, m M) (v string, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: the value function panicked: %v", ErrInvalidIndexValue, p)
		}
	}()
	return value(m), nil
}

// claim takes a unique index's value for a new instance and returns its
// ID, or the ID of the instance that took it first.
func (x indexer) claim(ctx context.Context, sagaName, name, value string) (string, error) {
	key := uniqueKey(sagaName, name, value)
	for range maxEntryTries {
		e, erev, err := x.loadEntry(ctx, key)
		switch {
		case errors.Is(err, ErrNotFound):
			erev = 0
		case err != nil:
			return "", err
		default:
			st, err := x.check(ctx, sagaName, name, value, e.ID, e)
			if err != nil {
				return "", err
			}
			if st != entryStale {
				return e.ID, nil
			}
		}
		id := rand.Text()
		err = x.putEntry(ctx, key, indexEntry{ID: id, At: x.now().UnixMilli()}, erev)
		if err == nil {
			return id, nil
		}
		if !errors.Is(err, ErrConflict) && !errors.Is(err, ErrNotFound) {
			return "", err
		}
	}
	return "", fmt.Errorf("%w: saga %s: index %s: entry for %.64q kept changing", ErrConflict, sagaName, name, value)
}

// building reports whether a rebuild of the index has started and not
// finished.
func (x indexer) building(ctx context.Context, sagaName, name string) (bool, error) {
	raw, _, err := x.store.Load(ctx, buildKey(sagaName, name))
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var b buildState
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, fmt.Errorf("saga: index build state %s unreadable: %w", buildKey(sagaName, name), err)
	}
	return !b.Done, nil
}

type buildState struct {
	Done bool `json:"done"`
}

// indexRecords puts indexedRecords in front of next if a saga of the
// dispatcher declares indexes.
func (d *Dispatcher) indexRecords(next records) records {
	for _, rt := range d.byName {
		if ix, ok := rt.(indexed); ok && len(ix.indexSpecs()) > 0 {
			_, units := d.store.(UnitStore)
			r := indexedRecords{records: next, ix: d.indexer(), byName: d.byName, units: units}
			if units {
				r.created = newCreatedEntries()
			}
			return r
		}
	}
	return next
}
