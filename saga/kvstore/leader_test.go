package kvstore_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
)

// TestLeaderReads runs the Load contract through the leader reads that a
// replicated bucket uses (on one server, where the leader is the server):
// missing, created, updated, deleted and expired keys.
func TestLeaderReads(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	js := connectJS(t)
	s, err := kvstore.New(ctx, js, kvstore.Config{Bucket: "leader", MemoryStorage: true})
	if err != nil {
		t.Fatal(err)
	}
	kvstore.ReadFromLeader(s, js, "leader")
	const key = "order.b3JkZXItMQ"
	if _, _, err := s.Load(ctx, key); !errors.Is(err, saga.ErrNotFound) || !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("Load missing: %v, want saga.ErrNotFound and jetstream.ErrKeyNotFound", err)
	}
	rev1, err := s.Put(ctx, key, []byte("v1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if v, rev, err := s.Load(ctx, key); err != nil || string(v) != "v1" || rev != rev1 {
		t.Fatalf("Load after create: %q rev %d, %v; want v1 rev %d", v, rev, err, rev1)
	}
	rev2, err := s.Put(ctx, key, []byte("v2"), rev1)
	if err != nil {
		t.Fatal(err)
	}
	if v, rev, err := s.Load(ctx, key); err != nil || string(v) != "v2" || rev != rev2 {
		t.Fatalf("Load after update: %q rev %d, %v; want v2 rev %d", v, rev, err, rev2)
	}
	if err := s.Delete(ctx, key, rev2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Load(ctx, key); !errors.Is(err, saga.ErrNotFound) {
		t.Fatalf("Load after delete: %v, want saga.ErrNotFound", err)
	}
	if _, err := s.Put(ctx, key, []byte("v3"), 0); err != nil {
		t.Fatalf("Put create after delete: %v", err)
	}
	if v, _, err := s.Load(ctx, key); err != nil || string(v) != "v3" {
		t.Fatalf("Load after re-create: %q, %v; want v3", v, err)
	}
}
