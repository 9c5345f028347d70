// Package kvstore keeps saga state in a JetStream key-value bucket, with
// optimistic concurrency on the KV revision.
//
// A record's revision is the sequence number of its message in the
// bucket's stream: it only grows, also across a delete or an expiry and a
// new write of the same key, so a revision never comes back for a key —
// what the dispatcher's record cache (saga.WithRecordCache) relies on to
// let a step skip the load: an Update against a cached revision that is
// no longer the latest fails (saga.ErrConflict), and the step runs again
// on a fresh Load.
//
// Per saga step the dispatcher makes at most one Load (none when its
// cache holds the record) and one Put (Update with the revision), plus a
// second Put only when the step sent messages (see the saga package's
// "The commit path"). Schedules cannot live in the bucket itself: KV
// buckets discard new messages at their limits (DiscardNew), which
// streams that allow message schedules refuse; and ADR-50 atomic batches
// of state and schedules in one stream, measured on an R1 file stream
// (each batch is staged in a temporary file store), ran at a twentieth of
// the separate writes' rate (cmd/jetsaga-bench -only saga-probe).
package kvstore
