package kvstore

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// ReadFromLeader makes s read as on a replicated bucket, so that one
// server can test that path.
func ReadFromLeader(s *Store, js jetstream.JetStream, bucket string) { s.readFromLeader(js, bucket) }

// ListDirect is listDirect, for tests.
func (s *Store) ListDirect(ctx context.Context, prefix string) ([]string, error) {
	return s.listDirect(ctx, prefix)
}
