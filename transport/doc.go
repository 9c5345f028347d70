// Package transport is a scheduled-message queue with Azure Service Bus's
// semantics, on NATS JetStream or in memory.
//
// A [Broker] opens named queues: [NewJetStream] on a NATS connection, or
// [NewMemory] inside the process (for tests and the sagatest harness; it
// runs on a [Clock] it is given, by default the time package, which a
// testing/synctest bubble makes virtual). Both keep the same promises, and
// the transporttest conformance suite runs against both.
//
// # Messages and sequence numbers
//
// A [Message] carries a body and Service Bus's properties (MessageID,
// CorrelationID, SessionID, ReplyTo, Subject, ContentType, application
// Properties). The broker stamps each stored message with a sequence number
// (Seq, Service Bus's SequenceNumber) and the broker's UTC time of
// acceptance into the queue (EnqueuedAt, Service Bus's EnqueuedTimeUtc).
// Received and browsed messages carry both; Send, like Service Bus's,
// returns none for an immediate send (Schedule returns the scheduled
// sequence number).
//
// Active sequence numbers are unique, increasing and gap-free per queue
// partition: 1, 2, 3, ... in arrival order. A queue with Partitions > 1
// puts the partition id in the top 16 bits and the partition's own
// sequence in the low 48 ([Partition], [LocalSeq]); a session, a
// PartitionKey, and a MessageID always map to the same partition (in
// that order of precedence: give one tenant's messages one PartitionKey
// and its bursts fill only its partition). The 47-bit local range
// (1.4e14 messages per partition) does not roll over in practice; if it
// were exhausted JetStream would refuse new messages rather than wrap.
//
// # Scheduled messages
//
// [Queue.Schedule], or [Queue.Send] with ScheduledAt set, stores a message
// to become active at a given time and returns its scheduled sequence
// number, which has [ScheduledBit] set: scheduled and active messages are
// numbered in two separate logs per partition, so schedules (and their
// cancellations) never leave gaps among active sequence numbers. A
// scheduled message never activates before its time. On activation it is
// appended to the queue as if sent at that instant: a new (active)
// sequence number, EnqueuedAt set to the activation time, and ScheduledAt
// kept, so EnqueuedAt−ScheduledAt is its lateness. A time in the past
// activates at once.
//
// [Queue.Cancel] gives a definite answer, which Service Bus does not: nil
// means the message will never be delivered; [ErrAlreadyActivated] means
// it has been or will be delivered; [ErrNotFound] means no scheduled
// message with that number is pending (never existed, cancelled, or
// activated before the call). [Queue.CancelMany] cancels a batch
// concurrently.
//
// [Queue.Peek] and [Queue.Browse] list active and scheduled messages (with
// State, Seq, ScheduledAt, EnqueuedAt) from a sequence number, page by
// page, without receiving them. They are not a snapshot: a scheduled
// message that activates while they read (the active messages first, then
// the scheduled ones) may be in neither list.
//
// # Receiving
//
// [Queue.Receive] hands out messages under a peek-lock for the queue's
// LockDuration. [Delivery.Complete] removes one, [Delivery.Abandon]
// releases it for redelivery (DeliveryCount rises), [Delivery.DeadLetter]
// moves it to the queue's dead-letter queue with a reason and a
// description, and [Delivery.RenewLock] extends the lock. A message whose
// lock expires is redelivered. A message delivered MaxDeliveryCount times
// is delivered no more: abandoning its last delivery dead-letters it with
// reason [ReasonMaxDeliveryCountExceeded], and so does the expiry of that
// delivery's lock (on JetStream, within seconds, by the housekeeping
// below).
// Competing receivers, in one process or many, each get different
// messages, retrieved in sequence order; the order in which they are
// processed needs sessions. Receives on one [Queue] or [Subscription]
// (goroutines sharing it, say) hand out first deliveries in sequence
// order, per partition: a Receive never returns a first delivery older
// than one returned by a Receive that ended before it started, so each
// goroutine sees increasing sequence numbers. Redeliveries (DeliveryCount above 1, after Abandon or
// an expired lock) come back whenever they come back, as in Service Bus,
// and so does an activation held back while its receiver cannot tell
// whether it was cancelled (see below). A Receive hands out each delivery
// with at least three quarters of LockDuration left on its lock: it
// renews an older lock first (on JetStream, a lookup or a slow link may
// take that long), and releases, as Abandon would, a message whose lock
// expired before it could be returned.
//
// # Sessions
//
// On a queue with RequiresSession every message has a SessionID. A
// session's messages are delivered one at a time in sequence order: the
// next one goes to no receiver, in any process, until the current one is
// completed or dead-lettered, or its lock expires. Different sessions
// proceed in parallel. Use [Queue.AcceptSession] for a known session or
// [Queue.AcceptNextSession] for any session with work.
//
// As in Service Bus, a [SessionReceiver] holds its session exclusively:
// until it is closed, or its session lock expires, AcceptSession in any
// process returns [ErrSessionLocked] and AcceptNextSession passes the
// session over. The session lock lasts LockDuration and is renewed by
// every Receive (also while Receive waits) and by
// [SessionReceiver.RenewLock]; a receiver that does neither for
// LockDuration loses the session ([ErrSessionLockLost]), so one that dies
// holds it for at most LockDuration. On JetStream the lock is a message
// with a per-message TTL in the partition's schedule stream: it expires
// on whole seconds (LockDuration rounded up) plus the server's expiry
// pass, so a dead receiver's session may wait up to about a second more.
//
// # Duplicate detection
//
// A message with a MessageID that the queue remembers is acknowledged but
// not stored again; [SendResult].Duplicate reports it. Sends and schedules
// share one ID space per queue (per partition: a MessageID maps to one
// partition unless a SessionID or a PartitionKey picks it). The queue remembers a MessageID
//   - for DuplicateWindow after a message with it was accepted, whatever
//     became of it: received and completed, dead-lettered, still waiting;
//   - while a scheduled message with it is pending, and for DuplicateWindow
//     after it activated;
//   - for CancelRecordTTL (default 7 days) after a scheduled message with
//     it was cancelled, so that a late retry of a schedule request never
//     brings a cancelled message back.
//
// The JetStream broker remembers across server restarts and, on
// replicated streams, leader changes: its check reads stored messages,
// not nats-server's in-memory Nats-Msg-Id table (which a restarted server
// rebuilds only from messages still stored). It may remember a MessageID
// somewhat longer than the window: copies are cleaned up by receivers,
// every few seconds, once older than the window. The memory broker
// forgets exactly when the window ends.
//
// Two limits on JetStream. A dead-letter copy is deduplicated by the
// original's queue and sequence number with nats-server's Nats-Msg-Id
// table: if a receiver dies after the copy is written and before the
// original is acknowledged, the redelivered original is dead-lettered
// again without a second copy — unless, before that redelivery (within
// LockDuration), the server restarted and the first copy was received
// from the dead-letter queue and completed; then a second copy appears.
// And an immediate send costs two writes (the copy that holds its
// MessageID, and the queue stream's sourced message), so sequential sends
// run at about 0.7 of raw nats.go publishing on a 2-core machine; see
// BENCHMARKS.md.
//
// # Topics and subscriptions
//
// [Broker.OpenTopic] opens a topic (idempotent; [Broker.Topic] attaches
// to an existing one, [Broker.DeleteTopic] removes it with everything in
// it). A [Topic] is sent to, scheduled on, cancelled on, peeked and
// browsed exactly like a queue, with the same promises: sequence numbers
// and EnqueuedAt are the topic's (gap-free per partition, partition id in
// the top 16 bits), scheduled messages have their own numbers, Cancel is
// definite, and duplicate detection by MessageID is the queue's, across
// server restarts. Topics and queues have separate name spaces.
//
// [Topic.OpenSubscription] (or [Broker.OpenSubscription], for a service
// that only subscribes) opens a named [Subscription] (1–64 characters of
// [A-Za-z0-9_-]), idempotently: the same Filter and RequiresSession return
// the same subscription, another Filter or RequiresSession is refused with
// [ErrInvalidConfig] (delete the subscription and open it again),
// LockDuration and MaxDeliveryCount are updated. A subscription gets,
// once, each message that passes its [Filter] and enters the topic after
// OpenSubscription returned (perhaps also one that entered while it ran),
// with the topic's sequence number and EnqueuedAt. A scheduled message
// enters when it activates, and reaches every matching subscription once;
// on JetStream a sent message enters a moment after Send returns.
// Subscriptions survive restarts; deleting one
// ([Topic.DeleteSubscription]) loses nothing for the others.
//
// A Filter is a Service Bus correlation filter: the message's Subject
// (its type) must be one of Filter.Subjects (any if empty; at most 16),
// and each of Filter.Properties must be present on the message with
// exactly that value. Only the properties the topic declares in
// TopicConfig.FilterProperties (at most 8) can be filtered on; a filter
// on another is refused with [ErrFilterNotDeclared]. There are no SQL
// filters and no actions. Values are compared exactly, whatever they
// hold ('.', '*', '>', spaces, an empty string).
//
// A subscription is received from like a queue: peek-lock, Abandon,
// DeliveryCount, MaxDeliveryCount, RenewLock, and its own dead-letter
// queue named "<topic>/Subscriptions/<name>/$DeadLetterQueue", whose
// messages carry DeadLetterSource "<topic>/Subscriptions/<name>". A
// subscription with RequiresSession gets only the messages that have a
// SessionID, received through AcceptSession and AcceptNextSession with
// the exclusive session locks of queues; one without gets every matching
// message, with or without a SessionID. [Subscription.Browse] lists its
// active messages (waiting or locked).
//
// A topic keeps a message as long as a subscription has not completed
// or dead-lettered it: that is what [Topic.Peek] lists as active, and what
// Topic.Counts counts. A message that no subscription's filter passes is
// dropped as it enters (its sequence number stays used). Topics have no
// MaxBytes.
//
// On JetStream each topic partition is a schedule stream like a queue's
// (P_TS_T_p) and a topic stream (P_T_T_p) with interest retention, whose
// subjects carry the message's type and the values of the declared
// FilterProperties, each encoded as one subject token (base64url, so no
// value ever becomes a wildcard or a separator; values over 48 bytes as
// a 144-bit SHA-256 prefix, so two long values that collided would pass
// the same filters). A subscription is a durable consumer on each topic
// stream whose filter subjects are its Filter, so the server does the
// filtering and keeps a message exactly until every interested
// subscription acknowledged it. Its dead-letter queue is the stream
// P_SD_<len(T)>_T_S. Limits on JetStream:
//   - A session subscription has a durable consumer per session with
//     messages (MaxAckPending 1, as on a queue). A receiver that closes its
//     session with nothing left in it deletes that consumer, after
//     recording the session's last completed sequence number on the
//     schedule stream (kept until the subscription is deleted: a few bytes
//     per session ever seen), so that a session that comes back starts
//     after it. The consumer of a session whose receiver died is collected
//     by the next AcceptNextSession that finds it idle and unlocked. The
//     subscription's own consumer holds each message until it is handed
//     over to its session's consumer (two or three API calls per session
//     and batch), which session receivers do every second, and
//     AcceptNextSession and Counts (the subscription's and the topic's)
//     before they look; until then Topic.Peek still lists a message a
//     session has completed. AcceptNextSession and Counts list the topic
//     stream's consumers, so their cost grows with the number of open
//     sessions.
//   - Browse of a subscription reads the topic stream from the
//     subscription's acknowledgement floor (the oldest open session's, with
//     sessions) and filters on the client: its cost grows with the topic's
//     messages in that range, and it may list a message completed out of
//     order while another subscription still holds it.
//   - Copies of sent and activated messages are removed from the schedule
//     stream by receivers, as on a queue; on a topic, which may have no
//     receiver at all, they also expire after the longer of
//     DuplicateWindow and CancelRecordTTL (per-message TTL): a topic
//     stream unavailable for that long would lose what it had not yet
//     sourced from the schedule stream.
//
// # Counts
//
// [Queue.Counts], [Topic.Counts] and [Subscription.Counts] report, like
// Service Bus's runtime properties, the active messages (waiting or
// locked), the scheduled ones and the dead-lettered ones, and on a
// subscription those not yet delivered ([Counts].Pending). Each figure is
// exact at the instant it is read and never negative, also while
// cancellations race activations (both only ever remove a schedule). A
// message sent a moment ago is counted once it has reached the queue or
// topic; one delivered MaxDeliveryCount times counts as active until it
// is moved to the dead-letter queue; abandoned messages and those whose lock
// expired are active but not pending.
//
// On JetStream no message is scanned: Active and DeadLettered are stream
// message counts, a subscription's Active and Pending its consumers'
// pending counts, and Scheduled the pending count of a consumer ("count-
// scheduled", created by the first Counts) filtered on the schedule
// stream's schedules and never pulled, which the server keeps up to date.
// Measured with 100,000 schedules pending (go run ./cmd/jetsaga-bench
// -only counts, 2 cores, two runs): Queue.Counts takes 0.9–1.2 ms at the
// median and 1.6–3.1 ms at p99, where StreamInfo with a subject filter on
// the schedules, the other server-side way, takes 300–306 ms and 0.7–0.8 s
// (it returns one entry per schedule). Counts makes one call per partition
// for each figure; on a session subscription it hands messages over and
// lists the topic stream's consumers first (see above), and a topic's
// Counts has each of its session subscriptions hand over first (a few
// calls per subscription). A cancelled message whose activation landed in
// the instant of its cancellation (see Cancel above) counts as active
// until a receiver drops it.
//
// # Queue state
//
// A queue keeps small records beside its messages: [Queue.LoadState],
// [Queue.CommitState], [Queue.DeleteState], [Queue.StateKeys]. A record
// has a key (dot-separated tokens of [A-Za-z0-9_=-], checked like any
// input: [ErrInvalidStateKey]), a value and a revision that only grows
// and is never reused for a key, also after a delete or an expiry (TTL).
// CommitState writes a record if its revision is the one given
// ([ErrStateConflict] otherwise) together with up to [MaxStateSchedules]
// messages scheduled on the queue, all or nothing; a message whose
// MessageID the queue remembers refuses the whole commit
// ([ErrDuplicateMessage]). On JetStream the records live in the
// partition's schedule stream (never delivered) and a commit with
// messages is one atomic batch, which nats-server stages in a synced file
// on a queue of one file-stored replica ([Queue.StateCommitsStaged]). The
// saga runtime keeps its records there with saga/queuestore.
//
// # Input checks
//
// Queue names are 1–64 characters of [A-Za-z0-9_-]. String fields travel
// as headers: UTF-8 without control characters (C0 U+0000–U+001F, DEL and
// C1 U+0080–U+009F), at most 4096 bytes each; MessageID and SessionID at
// most 128 bytes; at most 64 properties with keys of 1–64 characters of
// [A-Za-z0-9_-]. IDs are encoded (or hashed) before they reach a NATS
// subject, so '.', '*', '>' and spaces can never act as subject separators
// or wildcards. A message's body and encoded headers must fit the
// server's max_payload less 512 bytes ([Broker.MaxBodySize] computes the
// room left for a body). Every check is made before anything is written,
// and returns an error that errors.Is matches: [ErrInvalidQueueName],
// [ErrInvalidMessage], [ErrMessageTooLarge], [ErrSessionRequired],
// [ErrClosed].
//
// # On JetStream
//
// Each partition p of queue N is two streams. Every write goes to the
// schedule stream (P_S_N_p, limits retention, message schedules enabled),
// each message on subjects of its own named after its MessageID (a hash of
// it) or a NUID: an immediate send as a copy that the queue stream
// sources at once; a scheduled message as a schedule that nats-server's
// scheduler activates by writing that copy at its time. The queue stream
// (P_Q_N_p, work-queue retention) takes only what it sources, so active
// messages get its contiguous sequence numbers, and EnqueuedAt is the time
// a copy was stored there. A send or schedule with a MessageID is written
// only if no subject of that MessageID holds a message (a conditional
// write on the server), which is how duplicate detection survives
// restarts; copies with a MessageID are kept for the duplicate window,
// copies without one are purged once sourced. Receivers share one durable
// pull consumer per partition, whose MaxDeliver is MaxDeliveryCount; each
// session has its own durable consumer with MaxAckPending 1. The
// dead-letter queue is the stream P_D_N. The streams listen on exactly
// the subjects of the wire format (docs/wire.md in the repository), and
// the queue stream on none: a publish anywhere else is refused by the
// server, not stored and lost.
//
// Housekeeping. Every Broker looks after the queues it has opened or
// attached, receiving from them or not, in one goroutine per Broker: it
// moves messages that exhausted their deliveries to the dead-letter
// queue (on the server's advisory, or, for one no broker heard, on a look
// every 5 s while the queue has no delivery in flight), purges sourced
// copies from the schedule stream, and watches the sourcing of
// replicated queues. Any number of Brokers may look after one queue.
// Without any (a queue read only by clients in other languages, with no
// jetsaga process that has it open), a message that exhausted its
// deliveries waits, undelivered and counted as active, until one runs.
//
// Receivers pull: each Receive asks a consumer's leader for messages, and
// the server hands a message to a pull for as long as the pull lives
// there, from the moment the request reaches it until it expires. Over a
// slow link (requests reaching the server a second or more late), or from
// a loaded server, that lasts past the Receive that made the pull (a
// Receive whose deadline passed waits up to a second more for its pull's
// end, which on a fast link comes at once). What such a pull brings is not
// lost: the broker keeps it, renewing its lock, for the next Receive on
// the same [Queue], [Subscription] or [SessionReceiver], which gets it
// with its DeliveryCount unchanged and its lock counted from when it
// arrived or was last renewed (renewed again, if less than three quarters
// of it is left, before the Receive returns), together with the rest of
// what the same pull brought. A kept message that no Receive takes within
// twice LockDuration (at least 10 s) is released, as by Abandon (that
// counts as a delivery), and so is what a SessionReceiver or the Broker
// still holds, or still gets, when it closes, and what a pull brings after
// its Receive's context was cancelled (not a deadline: cancelling says the
// receiver stops). A pull the server never ends (it restarted) is given up
// 30 s after its expiry; a message it brings later waits out its lock.
// While a Receive waits, its session lock is renewed in the background, so
// a slow link does not cost the session.
//
// A receiver that cannot tell whether an activation was cancelled in the
// instant it activated (see Cancel below: the lookup of its cancel record
// failed, say timed out) does not deliver it: it keeps it, locked, and
// tries again every 250 ms until the lookup answers. Keeping it back does
// not count as a delivery.
//
// Cancel writes a cancel record that the server accepts only while the
// schedule is still stored (an expected-last-subject-sequence condition),
// and that purges the schedule in the same step. Once a message is due,
// the server's scheduler may have read the schedule an instant before and
// still write the activation; so a message due within 500 ms counts as
// activated (Cancel returns ErrAlreadyActivated and it is delivered), which
// keeps both Cancel's answer and the sequence numbers exact. Should a
// cancel record still land after the due time — a request delayed, or a
// client clock behind the server's, by more than that — a receiver drops
// the activation, so a nil from Cancel always holds; that activation's
// sequence number then goes unused. Cancel records live for
// CancelRecordTTL; a scheduled message no longer stored and without one
// has activated.
//
// On replicated streams (Replicas > 1, or a stream the server replicates)
// every read goes to the stream's leader: direct gets, which any replica
// may answer from a state a little behind, are turned off (AllowDirect).
// Complete and DeadLetter there return once the leader has removed the
// message (JetStream removes an acknowledged message from a work-queue
// stream by a raft proposal of its own, after the ack), so Peek, Browse
// and AcceptNextSession never show a settled message. Receivers with
// nothing to receive check every few seconds that the queue stream still
// hears from its source (the schedule stream); after the schedule
// stream's leader changed, nats-server may retry a failed sourcing with a
// backoff of tens of seconds, so a source silent for 4 s has the queue
// stream's leader stepped down, which restarts it at once.
//
// Opening an existing queue, topic or subscription with an unchanged
// config writes nothing: streams are opened with create requests, which
// the server answers with the existing stream when the configs are equal,
// and updated only when it reports another one (an update, even one that
// changes nothing, rewrites the stream's store config). On a cluster,
// processes that create one stream at once may get no answer before its
// leader is elected; the broker asks again (2 s, then 4 s, ...). A
// subscription's consumers start after the last message that the topic
// stream's leader holds when OpenSubscription creates them, so that on
// replicated streams too a subscription gets nothing that entered the
// topic before it was opened.
//
// MaxBytes on JetStream: Send counts the queue stream's size, as read at
// most 100 ms before, plus every copy this broker sent that the queue
// stream had not sourced yet when it was read (a sent message lands in
// the schedule stream and moves into the queue stream a moment later;
// on a replicated stream the lag is longer, since every sourced copy is
// a raft proposal of its own). A copy's size is estimated on the high
// side: the message plus about 350 bytes of record and sourcing header
// on a queue. So with one broker sending, the messages Send accepts never
// take a partition past MaxBytes, on one server or R3. Brokers do not see
// each other's unsourced copies: with several, the partition can be
// offered more than MaxBytes, by what the others accepted within those
// 100 ms and their sourcing lag. The queue stream enforces the cap
// itself (DiscardNew): what exceeds it waits in the schedule stream and
// moves in as space frees, never dropped.
//
// On a cluster a request can go unanswered: one that reaches a stream
// while it elects a leader (a stepdown, a leader lost) is dropped by
// every replica, and nats-server sends no error. Each JetStream request
// on the path of Send, Schedule, Cancel and Complete (and DeadLetter) is
// therefore one try of 250 ms (or four times the recent answer time, on
// a loaded server; doubling with each try, up to 2 s), asked again, as
// is an answer saying the stream has no leader yet, until the caller's
// context ends (without a deadline: the broker's API timeout).
// After a stepdown these operations answer within a few hundred
// milliseconds. Retries keep each operation definite: a write retried
// after an unanswered try is guarded so that the server stores it at
// most once (a message without MessageID on its own subject key), and a
// retry refused because an earlier try was stored counts as stored, not
// as a duplicate (the stored message is compared with the one sent: same
// subject, body and Jetsaga headers); a cancel record carries the
// Cancel's own ID (Jetsaga-Cancel-Id), so a retried Cancel still returns
// nil for its own record; an ack retried after an unanswered try counts a
// message gone from the queue stream as acknowledged. Two cases where this
// cannot be exact: a message without MessageID whose unanswered first
// copy was already sourced, received and purged (receivers purge sourced
// copies every 5 s) before a retry is stored twice; and a scheduled
// message whose try went unanswered and which activated before a retry
// could read it back (it was due within a second or two) is reported
// with Seq 0: it is delivered, and there is nothing left to cancel.
//
// Opening and attaching (OpenQueue, Queue, OpenTopic, Topic,
// OpenSubscription, Subscription) ask again too, until the
// caller's context ends, and so end with a definite answer: opened, or an
// error that says why (ErrInvalidConfig for another shape or filter,
// ErrQueueNotFound, ErrTopicNotFound, ...), however long a busy cluster
// takes. Each partition's calls are one attempt of at most the API
// timeout (WithAPITimeout); every call is idempotent (a lookup, or a
// create or update that asks for the same config), so an attempt that
// went unanswered, perhaps having taken effect, is simply made again (on
// a cluster under load the meta leader answers a new stream or consumer
// only once its group elected a leader, and of concurrent requests for
// one, only the last; processes that open one subscription at once wait
// on that). An answer saying JetStream is temporarily unavailable is asked
// again too. Each retry is logged at Warn level. With a context without a
// deadline an open waits as long as the cluster does not answer: give it
// a deadline to bound the wait, and it then returns the context's error.
//
// Limits of the guarantees: a message is safe once Send or Schedule
// returned; with nats-server's default sync policy it has reached the
// operating system, so it survives a crash of the server process, and is
// fsynced within 2 minutes (sync_interval), so a power loss can lose the
// last writes unless the server runs with sync: always or a replicated
// stream (Replicas 3). The scheduler fires at most every 250 ms, so
// activations are up to about 250 ms late under load, never early; overdue
// schedules fire about 250 ms after a server restart. Streams whose limits
// would silently drop pending messages (MaxAge, MaxMsgs,
// MaxMsgsPerSubject, MaxBytes with DiscardOld) are refused by OpenQueue
// with [ErrInvalidConfig]. Delivery is at least once: the server writes a
// consumer's state (what was delivered and completed) a moment after it
// confirms a completion, so a crash of the server process right after
// Complete returned can undo it, and the message is delivered again (with
// a higher DeliveryCount) once its lock expires; on a session, the
// session's next messages wait for it.
package transport
