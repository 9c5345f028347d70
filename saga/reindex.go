package saga

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// Rebuilding indexes: Dispatcher.Reindex.

// ReindexResult is what Reindex did.
type ReindexResult struct {
	// Records is how many records of the saga it read.
	Records int
	// Indexed is how many it wrote, with their index values and entries;
	// the others held them already, or were completed.
	Indexed int
	// Failed are the instances it could not index: a unique value
	// another instance holds (ErrIndexValueTaken), an invalid value
	// (ErrInvalidIndexValue), data it cannot decode.
	Failed []ReindexFailure
}

// ReindexFailure is an instance Reindex could not index, and why.
type ReindexFailure struct {
	ID  string
	Err error
}

// maxReindexTries bounds the attempts on one record that a concurrent
// step keeps changing.
const maxReindexTries = 10

// Reindex indexes the instances of saga s written before its indexes
// existed (or before one was added): for each live record of the saga it
// computes the values of every index the definition declares, writes
// their entries and the record, as a step's commit does. A record that
// holds its values already is not written, so Reindex is idempotent and,
// run again after it was stopped, resumes by reading past the records it
// did. It runs beside live traffic: each record is written at the
// revision it was read at, and a step that changes it meanwhile (which
// indexes it itself) makes Reindex read it again; no update is lost.
// Records are not otherwise changed (their Updated time stays).
//
// While it runs, Find on the saga's indexes yields ErrIndexBuilding
// after the instances found. It needs a store that lists its keys
// (ListingStore; errors.ErrUnsupported otherwise). Instances it cannot
// index are in the result's Failed; the error is for what stops it (the
// store, ctx).
func (d *Dispatcher) Reindex(ctx context.Context, s Saga) (ReindexResult, error) {
	var res ReindexResult
	_, ok := d.byName[s.Name()]
	ix, hasIndexes := s.runtime().(reindexer)
	switch {
	case !ok:
		return res, fmt.Errorf("%w: saga %s: not run by this dispatcher", ErrInvalidIndex, s.Name())
	case !hasIndexes || len(ix.indexSpecs()) == 0:
		return res, fmt.Errorf("%w: saga %s declares no index", ErrInvalidIndex, s.Name())
	}
	ls, ok := d.store.(ListingStore)
	if !ok {
		return res, fmt.Errorf("saga: reindexing %s: the store (%T) cannot list its keys: %w", s.Name(), d.store, errors.ErrUnsupported)
	}
	x := d.indexer()
	names := make([]string, 0, len(ix.indexSpecs()))
	for _, spec := range ix.indexSpecs() {
		names = append(names, spec.name)
	}
	if err := x.setBuilding(ctx, s.Name(), names, false); err != nil {
		return res, err
	}
	var keys []string
	for key, err := range ls.ListKeys(ctx, s.Name()+".") {
		if err != nil {
			return res, fmt.Errorf("saga: reindexing %s: %w", s.Name(), err)
		}
		keys = append(keys, key)
	}
	slices.Sort(keys)
	w := indexedRecords{records: storeRecords{store: d.store, retention: d.cfg.retention}, ix: x, byName: d.byName}
	for _, key := range keys {
		enc, _ := strings.CutPrefix(key, s.Name()+".")
		id, err := base64.RawURLEncoding.DecodeString(enc)
		if err != nil || strings.Contains(enc, ".") {
			continue // not an instance's record
		}
		res.Records++
		wrote, err := d.reindexRecord(ctx, w, ix, key)
		switch {
		case ctx.Err() != nil:
			return res, context.Cause(ctx)
		case unavailable(err):
			return res, fmt.Errorf("saga: reindexing %s: %w", s.Name(), err)
		case err != nil:
			res.Failed = append(res.Failed, ReindexFailure{ID: string(id), Err: err})
		case wrote:
			res.Indexed++
		}
	}
	return res, x.setBuilding(ctx, s.Name(), names, true)
}

// reindexer is a Definition as Reindex sees it.
type reindexer interface {
	indexed
	reindex(c Codec, rec *record) error
}

// reindex computes rec's index values from its data (upcast as a step
// would).
func (d *Definition[S]) reindex(c Codec, rec *record) error {
	data, err := d.loadData(c, rec)
	if err != nil {
		return err
	}
	return d.setIndex(rec, data)
}

// reindexRecord indexes the record under key, and reports whether it
// wrote it.
func (d *Dispatcher) reindexRecord(ctx context.Context, w indexedRecords, ix reindexer, key string) (bool, error) {
	for range maxReindexTries {
		rec, rev, err := d.load(ctx, key)
		if errors.Is(err, ErrNotFound) {
			return false, nil // completed and gone meanwhile
		}
		if err != nil {
			return false, err
		}
		if rec.Completed {
			return false, nil
		}
		before := rec.Index
		if err := ix.reindex(d.cfg.codec, rec); err != nil {
			return false, err
		}
		if len(rec.IndexNew) == 0 && sameIndex(before, rec.Index) {
			return false, nil
		}
		// Entries of values it held already are written again: they
		// may never have been, for a record indexed by hand.
		rec.IndexNew = rec.Index
		_, err = w.commit(ctx, key, rec, rev)
		if !errors.Is(err, ErrConflict) {
			return err == nil, err
		}
	}
	return false, fmt.Errorf("%w: %s kept changing", ErrConflict, key)
}

func sameIndex(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// setBuilding notes that indexes of a saga are being built, or are built
// (done).
func (x indexer) setBuilding(ctx context.Context, sagaName string, names []string, done bool) error {
	b, err := json.Marshal(buildState{Done: done})
	if err != nil {
		return err
	}
	for _, name := range names {
		key := buildKey(sagaName, name)
		for range maxEntryTries {
			_, rev, err := x.store.Load(ctx, key)
			if err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
			if _, err = x.store.Put(ctx, key, b, rev); !errors.Is(err, ErrConflict) {
				if err != nil {
					return fmt.Errorf("saga: noting the build of index %s of %s: %w", name, sagaName, err)
				}
				break
			}
		}
	}
	return nil
}

// ReindexMessageType is the type (TypeProperty) of a message that asks
// the dispatchers of a queue to rebuild the indexes of the saga its
// timeout.PropertySaga property names: one of them runs Reindex, renewing
// the message's lock while it runs, and completes it; a dispatcher that
// dies meanwhile leaves it for another, which resumes (Reindex is
// idempotent). A dispatcher that does not run the saga, or a saga
// without indexes, dead-letters it (ReasonPermanent). RequestReindex
// sends one; so does `jetsaga sagas reindex`.
const ReindexMessageType = "jetsaga.reindex"

// RequestReindex asks the dispatchers of queue q that run saga sagaName to
// rebuild its indexes (see ReindexMessageType), for an operator or a
// deploy step that has no dispatcher of its own, and returns the request
// message's MessageID. IndexesBuilt tells when the rebuild is done.
func RequestReindex(ctx context.Context, q *transport.Queue, sagaName string) (string, error) {
	if err := transport.ValidateQueueName(sagaName); err != nil {
		return "", fmt.Errorf("%w: saga name %.64q", ErrInvalidIndex, sagaName)
	}
	id := "jetsaga-reindex-" + sagaName + "-" + rand.Text()
	_, err := q.Send(ctx, &transport.Message{MessageID: id, Properties: map[string]string{propType: ReindexMessageType, propSaga: sagaName}})
	return id, err
}

// IndexesBuilt reports whether every rebuild of saga sagaName's indexes
// that was started (Reindex) has finished, reading store alone: true
// also for a saga whose indexes were never rebuilt.
func IndexesBuilt(ctx context.Context, store ListingStore, sagaName string) (bool, error) {
	for key, err := range store.ListKeys(ctx, "=ixb."+sagaName+".") {
		if err != nil {
			return false, err
		}
		name := strings.TrimPrefix(key, "=ixb."+sagaName+".")
		b, err := indexer{store: store}.building(ctx, sagaName, name)
		if err != nil || b {
			return false, err
		}
	}
	return true, nil
}

// reindexMessage runs the rebuild a message of ReindexMessageType asks
// for, renewing its lock meanwhile, and settles it.
func (d *Dispatcher) reindexMessage(ctx context.Context, del *transport.Delivery) StepResult {
	name := del.Properties[propSaga]
	rt, ok := d.byName[name]
	if !ok {
		return d.deadLetter(ctx, del, ReasonPermanent, Permanent(fmt.Errorf("%w: reindex: saga %.64q is not run by this dispatcher", ErrInvalidIndex, name)), nil)
	}
	renewed := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(renewed)
		every := 15 * time.Second // half the default LockDuration
		if ld := d.cfg.queue.LockDuration; ld > 0 {
			every = max(ld/2, 100*time.Millisecond)
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_ = del.RenewLock(ctx)
			}
		}
	}()
	res, err := d.Reindex(ctx, rt.(Saga))
	close(stop)
	<-renewed
	switch {
	case errors.Is(err, ErrInvalidIndex):
		return d.deadLetter(ctx, del, ReasonPermanent, Permanent(err), nil)
	case err != nil:
		_ = del.Abandon(ctx)
		return StepResult{Outcome: Abandoned, Err: err}
	}
	d.cfg.logger.LogAttrs(ctx, slog.LevelInfo, "saga: indexes rebuilt", slog.String("saga.type", name),
		slog.Int("records", res.Records), slog.Int("indexed", res.Indexed), slog.Int("failed", len(res.Failed)))
	for _, f := range res.Failed {
		d.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "saga: instance not indexed", slog.String("saga.type", name),
			slog.String("saga.id", f.ID), slog.Any("error", f.Err))
	}
	if err := del.Complete(ctx); err != nil {
		return StepResult{Outcome: Abandoned, Err: err}
	}
	return StepResult{Outcome: Handled}
}
