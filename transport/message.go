package transport

import (
	"maps"
	"strconv"
	"time"
)

// Message is what a queue stores: a body, the properties a sender sets, and
// the facts the broker assigns. It follows Azure Service Bus's message
// model; each field's comment names its Service Bus counterpart where the
// name differs.
//
// The string fields travel as headers: each is at most 4096 bytes of
// UTF-8 without control characters (U+0000–U+001F, U+007F and
// U+0080–U+009F); MessageID, SessionID and PartitionKey at most 128
// bytes.
type Message struct {
	// Body is the payload. Its size plus the encoded header fields must fit
	// the server's max payload less a reserve of 512 bytes for the
	// transport's own headers, else the send fails with
	// ErrMessageTooLarge; Broker.MaxBodySize tells how large a body a
	// message can carry.
	Body []byte

	// ContentType describes Body, for example "application/json".
	ContentType string
	// MessageID identifies the message for duplicate detection: a second
	// message with the same MessageID sent or scheduled to the same queue
	// while the queue remembers it (see QueueConfig.DuplicateWindow) is
	// accepted but not stored again (SendResult.Duplicate). Sends and
	// schedules share one ID space per queue. It travels in a header:
	// 1–128 bytes of UTF-8, no control characters.
	// Default: empty, which disables duplicate detection for this message.
	MessageID string
	// CorrelationID links a reply to its request.
	CorrelationID string
	// SessionID groups messages that must be processed one at a time in
	// sequence order. Required on queues with RequiresSession set.
	SessionID string
	// PartitionKey chooses the partition of a queue or topic with several
	// (QueueConfig.Partitions), as Service Bus's PartitionKey does: every
	// message with the same key goes to the same partition, so a tenant's
	// or an account's messages and timeouts share one log, and a burst on
	// one key fills only its partition (see docs/guarantees.md,
	// "Partitions and noisy neighbours"). A message with a SessionID goes
	// to its session's partition: a PartitionKey beside it must equal the
	// SessionID. Duplicates are detected per partition: two messages with
	// one MessageID and different keys may both be stored. Without a key
	// the MessageID chooses the partition. At most 128 bytes.
	PartitionKey string
	// ReplyTo names the queue a reply should go to.
	ReplyTo string
	// Subject is an application label (Service Bus's Subject, formerly
	// Label).
	Subject string
	// Properties are application key/value pairs. Keys are 1–64 characters
	// of [A-Za-z0-9_-]; values are any UTF-8 without control characters.
	Properties map[string]string

	// ScheduledAt, when set on Send, schedules the message for that instant
	// (Service Bus's ScheduledEnqueueTime). On an activated message it keeps
	// the time the message was due, so EnqueuedAt-ScheduledAt is lateness.
	ScheduledAt time.Time

	// Seq is the broker-assigned sequence number (read-only). For an active
	// message it is gap-free per queue partition; for a scheduled message it
	// carries the ScheduledBit. See the package documentation.
	Seq uint64
	// EnqueuedAt is the broker's UTC time of acceptance; for an activated
	// scheduled message, the activation instant (read-only).
	EnqueuedAt time.Time
	// State tells active and scheduled messages apart when browsing.
	State MessageState

	// DeadLetterReason and DeadLetterDescription are set on messages in a
	// dead-letter queue; DeadLetterSource names the queue it came from and
	// DeadLetterSeq its sequence number there.
	DeadLetterReason      string
	DeadLetterDescription string
	DeadLetterSource      string
	DeadLetterSeq         uint64
}

// Clone returns a deep copy of m.
func (m *Message) Clone() *Message {
	c := *m
	c.Body = append([]byte(nil), m.Body...)
	c.Properties = maps.Clone(m.Properties)
	return &c
}

// MessageState is the lifecycle state of a stored message: active or
// scheduled. (A queue's state records, LoadState and CommitState, are
// something else.)
type MessageState int

const (
	// Active messages can be received.
	Active MessageState = iota + 1
	// Scheduled messages wait for their ScheduledAt time.
	Scheduled
)

func (s MessageState) String() string {
	switch s {
	case Active:
		return "active"
	case Scheduled:
		return "scheduled"
	}
	return "unknown"
}

// Sequence number layout.
const (
	// PartitionShift is where the partition id starts in a sequence number:
	// the top 16 bits are the partition, the low 48 bits its own sequence.
	PartitionShift = 48
	// ScheduledBit marks the sequence number of a scheduled message, which
	// is drawn from the partition's schedule log rather than its queue log,
	// so that the two can never collide and active sequence numbers stay
	// gap-free. It leaves 47 bits (1.4e14) for each log.
	ScheduledBit = uint64(1) << 47
	seqMask      = ScheduledBit - 1
)

// Partition returns the partition id held in the top 16 bits of seq.
func Partition(seq uint64) int { return int(seq >> PartitionShift) }

// IsScheduledSeq reports whether seq names a scheduled message.
func IsScheduledSeq(seq uint64) bool { return seq&ScheduledBit != 0 }

// FormatSeq formats a sequence number as the jetsaga command shows it:
// PARTITION:LOCAL for an active message ("0:20"), PARTITION:sLOCAL for a
// scheduled one ("0:s20"), where LOCAL is LocalSeq. (As a decimal, the
// ScheduledBit makes a scheduled message's number read 140737488355348.)
func FormatSeq(seq uint64) string {
	s := strconv.Itoa(Partition(seq)) + ":"
	if IsScheduledSeq(seq) {
		s += "s"
	}
	return s + strconv.FormatUint(LocalSeq(seq), 10)
}

// LocalSeq returns the per-partition sequence inside seq, without the
// partition id and the ScheduledBit.
func LocalSeq(seq uint64) uint64 { return seq & seqMask }

func makeSeq(partition int, scheduled bool, local uint64) uint64 {
	s := uint64(partition)<<PartitionShift | local&seqMask
	if scheduled {
		s |= ScheduledBit
	}
	return s
}
