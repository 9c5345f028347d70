// Package kvstore keeps saga state in a JetStream key-value bucket, with
// optimistic concurrency on the KV revision.
package kvstore
