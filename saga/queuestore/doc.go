// Package queuestore keeps saga state in a transport queue's state
// (transport.Queue.CommitState): beside the queue's scheduled messages, so
// that a dispatcher on that queue commits a step's state and the timeouts
// it requests in one atomic write.
//
// With kvstore, a step that requests a timeout makes two replicated
// writes: the record (with the timeout in its outbox), then the schedule.
// With queuestore it makes one: on JetStream an ADR-50 atomic batch of the
// record, guarded by its revision, and the schedules, written exactly as
// the timeout engine writes them. Everything else is unchanged: the
// record's format, its revision (the stream sequence of its message,
// never reused), the inbox and outbox, duplicate detection of timeouts,
// Cancel, browsing and counting scheduled messages.
//
// It is for a dispatcher on a replicated queue (QueueConfig.Replicas 3 on
// a JetStream cluster), created with the queue's broker and name:
//
//	st := queuestore.New(broker, "orders")
//	d, err := saga.NewDispatcher(broker, st, "orders",
//		saga.WithQueueConfig(transport.QueueConfig{Replicas: 3}), saga.WithSagas(orders))
//
// The dispatcher takes timeouts into its commits when its store is this
// store on its own queue and broker and its timeout scheduler is a
// timeout.Queue on that broker (the default). Otherwise (a
// timeout.Router, a store on another queue) it commits as with any store
// and carries timeouts out after the commit.
//
// Limits:
//   - On a JetStream queue of one replica with file storage nats-server
//     stages each atomic batch in a synced file store of its own, which
//     makes a batch many times slower than two writes (BENCHMARKS.md,
//     r1batch): there the store takes no timeouts into its commits
//     (Store.SchedulesWith), and a step writes the record, then schedules
//     its timeouts, as with kvstore.
//   - Records live in the queue's streams: deleting the queue deletes
//     them, and the queue must be opened (OpenQueue, as the dispatcher
//     does) by a release that knows queue state (the streams get a subject
//     and the atomic publish setting).
//   - A step takes at most transport.MaxStateSchedules timeouts into its
//     commit; on a partitioned queue only those whose MessageID goes to
//     the record's partition. The rest are carried out after the commit.
//   - The jetsaga command and its console read these records when given
//     the queue: `jetsaga sagas list --state-queue orders` (or
//     $JETSAGA_STATE_QUEUE); by default they read the kvstore bucket.
package queuestore
