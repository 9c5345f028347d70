package kvstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

func connectJS(t *testing.T) jetstream.JetStream {
	t.Helper()
	nc, err := testutil.StartServer(t, embedded.Options{}).Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestExpiryLeavesNoTrace: a key written with PutTTL expires, created or
// updated; a deleted key's purge marker and an expired key's marker
// expire after MarkerTTL, so that finished sagas leave nothing in the
// stream. A bucket made before markers expired is upgraded.
func TestExpiryLeavesNoTrace(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	js := connectJS(t)
	// A bucket as kvstore used to make it: no marker TTL.
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "ttl", History: 1, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	s, err := kvstore.New(ctx, js, kvstore.Config{Bucket: "ttl", MemoryStorage: true, MarkerTTL: time.Second})
	if err != nil {
		t.Fatalf("kvstore.New on an existing bucket: %v", err)
	}
	stream, err := js.Stream(ctx, "KV_ttl")
	if err != nil {
		t.Fatal(err)
	}
	if cfg := stream.CachedInfo().Config; !cfg.AllowMsgTTL || cfg.SubjectDeleteMarkerTTL != time.Second {
		t.Fatalf("bucket stream: AllowMsgTTL %t, SubjectDeleteMarkerTTL %v; want true, 1s", cfg.AllowMsgTTL, cfg.SubjectDeleteMarkerTTL)
	}

	// Created with a TTL.
	if _, err := s.PutTTL(ctx, "a.created", []byte("t"), 0, time.Second); err != nil {
		t.Fatal(err)
	}
	// Keys read or written again before they expire get a TTL with room
	// for a round trip on a loaded machine; each such check fails, rather
	// than passes, if more than the TTL has gone by since the write.
	const roomyTTL = 3 * time.Second
	inTime := func(since time.Time, what string) {
		t.Helper()
		if took := time.Since(since); took >= roomyTTL {
			t.Fatalf("%s: %v since the write, more than its TTL %v: the machine is too slow for the check", what, took, roomyTTL)
		}
	}
	// Created for good, then updated with a TTL (a saga completing).
	rev, err := s.Put(ctx, "a.updated", []byte("v1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutTTL(ctx, "a.updated", []byte("v2"), rev+1, roomyTTL); !errors.Is(err, saga.ErrConflict) {
		t.Errorf("PutTTL at a wrong revision: %v, want saga.ErrConflict", err)
	}
	updatedAt := time.Now()
	if rev, err = s.PutTTL(ctx, "a.updated", []byte("v2"), rev, roomyTTL); err != nil {
		t.Fatal(err)
	}
	if v, r, err := s.Load(ctx, "a.updated"); err != nil || string(v) != "v2" || r != rev {
		inTime(updatedAt, "Load before expiry")
		t.Fatalf("Load before expiry: %q rev %d, %v", v, r, err)
	}
	// Deleted.
	drev, err := s.Put(ctx, "a.deleted", []byte("d"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "a.deleted", drev); err != nil {
		t.Fatal(err)
	}
	// Kept: a TTL followed by a plain Put keeps the key for good.
	keptAt := time.Now()
	krev, err := s.PutTTL(ctx, "a.kept", []byte("k1"), 0, roomyTTL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "a.kept", []byte("k2"), krev); err != nil {
		inTime(keptAt, "Put over a TTL")
		t.Fatal(err)
	}

	testutil.Await(t, 10*time.Second, func() string {
		for _, k := range []string{"a.created", "a.updated"} {
			if _, _, err := s.Load(ctx, k); !errors.Is(err, saga.ErrNotFound) {
				return fmt.Sprintf("%s: Load %v, want saga.ErrNotFound once expired", k, err)
			}
		}
		return ""
	})
	// Created again after expiry.
	if _, err := s.Put(ctx, "a.created", []byte("again"), 0); err != nil {
		t.Fatalf("Put create after expiry: %v", err)
	}
	if rev, err := s.Put(ctx, "a.created", []byte("again"), 0); !errors.Is(err, saga.ErrConflict) {
		t.Fatalf("Put create of an existing key: %d, %v", rev, err)
	}
	// Markers expire: the stream holds only the two live keys.
	testutil.Await(t, 10*time.Second, func() string {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(">"))
		if err != nil {
			return err.Error()
		}
		if info.State.Msgs != 2 {
			return fmt.Sprintf("stream holds %d messages on %v, want the 2 live keys only", info.State.Msgs, info.State.Subjects)
		}
		return ""
	})
	// a.kept outlives its first TTL and the marker it would have left.
	testutil.Await(t, 10*time.Second, func() string {
		if left := time.Until(keptAt.Add(roomyTTL + 2*time.Second)); left > 0 {
			return fmt.Sprintf("a.kept's first TTL and marker not over yet (%v left)", left)
		}
		return ""
	})
	if v, _, err := s.Load(ctx, "a.kept"); err != nil || string(v) != "k2" {
		t.Errorf("a.kept: %q, %v; want k2 kept for good", v, err)
	}
	if info, err := stream.Info(ctx, jetstream.WithSubjectFilter(">")); err != nil {
		t.Error(err)
	} else if info.State.Msgs != 2 {
		t.Errorf("stream after a.kept's first TTL holds %d messages on %v, want the 2 live keys only", info.State.Msgs, info.State.Subjects)
	}
}

func TestMemstoreExpiry(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s := memstore.New(memstore.WithClock(func() time.Time { return now }))
	ctx := context.Background()
	rev, err := s.PutTTL(ctx, "k", []byte("v"), 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Hour - time.Nanosecond)
	if v, r, err := s.Load(ctx, "k"); err != nil || string(v) != "v" || r != rev {
		t.Fatalf("before expiry: %q %d %v", v, r, err)
	}
	now = now.Add(time.Nanosecond)
	if _, _, err := s.Load(ctx, "k"); !errors.Is(err, saga.ErrNotFound) {
		t.Fatalf("at expiry: %v, want saga.ErrNotFound", err)
	}
	if _, err := s.Put(ctx, "k", []byte("w"), rev); !errors.Is(err, saga.ErrConflict) {
		t.Errorf("update of an expired key: %v, want saga.ErrConflict", err)
	}
	if _, err := s.Put(ctx, "k", []byte("w"), 0); err != nil {
		t.Fatalf("create after expiry: %v", err)
	}
	now = now.Add(100 * time.Hour)
	if v, _, err := s.Load(ctx, "k"); err != nil || string(v) != "w" {
		t.Errorf("plain Put: %q, %v; want kept for good", v, err)
	}
	if keys := s.Keys(); len(keys) != 1 {
		t.Errorf("keys %v", keys)
	}
}
