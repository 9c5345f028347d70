package kvstore

import "github.com/nats-io/nats.go/jetstream"

// ReadFromLeader makes s read as on a replicated bucket, so that one
// server can test that path.
func ReadFromLeader(s *Store, js jetstream.JetStream, bucket string) { s.readFromLeader(js, bucket) }
