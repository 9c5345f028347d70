package transport

// The names of jetsaga wire format v1 (docs/wire.md in the repository):
// what a NATS client in any language sends, receives and reads to work
// with jetsaga's JetStream queues. A test keeps this list and the document
// in agreement.
const (
	// WireVersion is the version of the wire format this package writes.
	WireVersion = 1

	// DefaultPrefix is the prefix of stream names and subjects unless
	// WithPrefix gives another.
	DefaultPrefix = "JETSAGA"

	// Headers that carry a Message's fields.
	HeaderMessageID     = "Jetsaga-Message-Id"
	HeaderContentType   = "Jetsaga-Content-Type"
	HeaderCorrelationID = "Jetsaga-Correlation-Id"
	HeaderSessionID     = "Jetsaga-Session-Id"
	HeaderPartitionKey  = "Jetsaga-Partition-Key"
	HeaderReplyTo       = "Jetsaga-Reply-To"
	HeaderSubject       = "Jetsaga-Subject"
	HeaderScheduledAt   = "Jetsaga-Scheduled-At"

	// Headers of a dead letter.
	HeaderDeadLetterReason      = "Jetsaga-Dead-Letter-Reason"
	HeaderDeadLetterDescription = "Jetsaga-Dead-Letter-Description"
	HeaderDeadLetterSource      = "Jetsaga-Dead-Letter-Source"
	HeaderDeadLetterSeq         = "Jetsaga-Dead-Letter-Seq"

	// HeaderPropertyPrefix, followed by a property's key, is the header
	// of an application property.
	HeaderPropertyPrefix = "Jetsaga-P-"

	// EscapePrefix marks a header value stored base64url-encoded: one
	// with leading or trailing whitespace, which NATS would trim, or one
	// that starts with EscapePrefix itself.
	EscapePrefix = "~b64~"

	// Subject tokens that tell a write's kind: a copy (a message to
	// deliver) with or without a MessageID, or a scheduled message.
	KindWithID    = "f"
	KindWithoutID = "g"
	ScheduleToken = "s"

	// ReceiveConsumer is the durable pull consumer that receivers of a
	// queue partition or a dead-letter queue share.
	ReceiveConsumer = "recv"

	// LeaseConsumer is the durable consumer on a queue partition's
	// schedule stream whose existence is the partition's housekeeping
	// lease: the jetsaga broker that created it (its description names
	// the holder) housekeeps the partition. It filters on a subject no
	// message is written to; leave it alone.
	LeaseConsumer = "jetsaga-housekeeper"

	// Stream metadata keys: a queue's number of partitions, whether it
	// requires sessions, and its QueueConfig as JSON; a topic's
	// TopicConfig as JSON (on every stream of the topic).
	MetaPartitions      = "jetsaga.partitions"
	MetaRequiresSession = "jetsaga.requires_session"
	MetaConfig          = "jetsaga.config"
	MetaTopic           = "jetsaga.topic"
)
