package kvstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/saga"
)

// Config describes the bucket. The zero value picks the defaults.
type Config struct {
	// Bucket is the KV bucket name. Default: "jetsaga_sagas".
	Bucket string
	// Replicas is the replication factor. Default: 1.
	Replicas int
	// MemoryStorage keeps the bucket in memory. Default: false (files).
	MemoryStorage bool
}

// Store is a saga.Store on a JetStream KV bucket.
type Store struct {
	kv jetstream.KeyValue
}

// New creates the bucket if needed and returns a Store on it. The bucket
// keeps one revision per key and no age limit: saga state never expires.
func New(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = "jetsaga_sagas"
	}
	storage := jetstream.FileStorage
	if cfg.MemoryStorage {
		storage = jetstream.MemoryStorage
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      cfg.Bucket,
		Description: "jetsaga saga state",
		History:     1,
		Storage:     storage,
		Replicas:    max(cfg.Replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("kvstore: bucket %s: %w", cfg.Bucket, err)
	}
	return &Store{kv: kv}, nil
}

// Load returns the value and revision of key, or saga.ErrNotFound.
func (s *Store) Load(ctx context.Context, key string) ([]byte, uint64, error) {
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, 0, fmt.Errorf("%w: %s: %w", saga.ErrNotFound, key, err)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("kvstore: load %s: %w", key, err)
	}
	return e.Value(), e.Revision(), nil
}

// Put writes value if key's revision is rev (0: create). A revision
// mismatch (JetStream error 10071) is saga.ErrConflict.
func (s *Store) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	var err error
	var n uint64
	if rev == 0 {
		n, err = s.kv.Create(ctx, key, value)
	} else {
		n, err = s.kv.Update(ctx, key, value, rev)
	}
	if isConflict(err) {
		return 0, fmt.Errorf("%w: %s: %w", saga.ErrConflict, key, err)
	}
	if errors.Is(err, nats.ErrMaxPayload) {
		// Retrying cannot make the record smaller: the step fails for good.
		return 0, saga.Permanent(fmt.Errorf("kvstore: put %s: record of %d bytes: %w", key, len(value), err))
	}
	if err != nil {
		return 0, fmt.Errorf("kvstore: put %s: %w", key, err)
	}
	return n, nil
}

// Delete removes key if its revision is rev; a missing key is
// saga.ErrNotFound.
func (s *Store) Delete(ctx context.Context, key string, rev uint64) error {
	if _, _, err := s.Load(ctx, key); err != nil {
		return err
	}
	if rev == 0 {
		return fmt.Errorf("%w: %s exists; delete needs its revision", saga.ErrConflict, key)
	}
	err := s.kv.Purge(ctx, key, jetstream.LastRevision(rev))
	if isConflict(err) {
		return fmt.Errorf("%w: %s: %w", saga.ErrConflict, key, err)
	}
	if err != nil {
		return fmt.Errorf("kvstore: delete %s: %w", key, err)
	}
	return nil
}

func isConflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) ||
		errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
