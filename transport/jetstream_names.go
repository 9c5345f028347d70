package transport

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Names. With prefix P, queue N and partition p (docs/wire.md gives the
// part of this that clients in other languages use):
//
//	stream P_S_N_p  every write (limits retention), on exactly these
//	                subjects (see schedSubjects):
//	            P.S.N.p.<key>.s           a scheduled message
//	            P.S.N.p.<key>.x.<seq>     the record of its cancellation, written
//	                                      on P.S.N.p.<key>.x.<seq>.cancel (see
//	                                      cancelTransform)
//	            P.S.N.p.<key>.f.<tail>    a message with a MessageID, sent or
//	                                      activated; sourced into the queue
//	            P.S.N.p.<key>.g.<tail>    the same without a MessageID
//	            P.L.N.p.<sid>             a session's lock (session queues)
//	            P.V.N.p.<state key>       a state record (see state.go; queues only)
//	stream P_Q_N_p  active messages (work queue), on no subject of its
//	                own: sourced from P_S_N_p, transformed to
//	            P.Q.N.p.m                 messages without session
//	            P.Q.N.p.s.<sid>           messages of session sid
//	stream P_D_N    subject P.D.N.0.m     the dead-letter queue
//
// <tail> is "m", or "s.<sid>" on a queue that requires sessions. <key> is "_" and 22 base64url characters of
// a hash of the MessageID, or a NUID (22 alphanumerics) for a message
// without one, so every message has its own subjects. All of a MessageID's
// traces share the prefix P.S.N.p.<key>., which is what makes duplicate
// detection survive restarts (see guard). N is [A-Za-z0-9_-] and the
// partition is decimal after the last '_', so the names never collide;
// session IDs are encoded by subjectToken.
type jsNames struct {
	queue, sched         string // stream names
	qSubj, sSubj         string // subject prefixes, without trailing dot
	vSubj                string // state records' subject prefix; "" on topics and dead-letter queues
	lock                 string // session lock subject prefix (see sessionLockSubject)
	isDeadLetter, hasSch bool
	// topic marks a topic's partition (see jetstream_topic.go): interest
	// retention, no receive consumer, and tokens filter tokens after the
	// session part of each subject.
	topic  bool
	tokens int
	meta   map[string]string // more stream metadata
}

func (d *jsDriver) names(queue string, p int) jsNames {
	ps := strconv.Itoa(p)
	return jsNames{
		queue:  d.o.prefix + "_Q_" + queue + "_" + ps,
		sched:  d.o.prefix + "_S_" + queue + "_" + ps,
		qSubj:  d.o.prefix + ".Q." + queue + "." + ps,
		sSubj:  d.o.prefix + ".S." + queue + "." + ps,
		vSubj:  d.o.prefix + ".V." + queue + "." + ps,
		lock:   d.o.prefix + ".L." + queue + "." + ps,
		hasSch: true,
	}
}

func (d *jsDriver) deadLetterNames(queue string) jsNames {
	return jsNames{
		queue:        d.o.prefix + "_D_" + queue,
		qSubj:        d.o.prefix + ".D." + queue + ".0",
		isDeadLetter: true,
	}
}

// cancelToken is the subject token of cancel records in the schedule
// stream: a record is stored as P.S.N.p.<key>.x.<seq>, under its
// MessageID's key, so that the MessageID of a cancelled message stays
// taken (see guard). It is written as P.S.N.p.<key>.x.<seq>.cancel
// (cancelWriteToken), which the stream's subject transform stores under
// the shorter subject (see cancelTransform): the stream listens on the
// written form alone, so that a publish on P.S.N.p.<key>.x.<anything> —
// a client's typo of x for f or g — is refused by the server instead of
// stored, never delivered, and left to make every later send with its
// MessageID a duplicate. docs/wire.md names the written form as jetsaga's
// bookkeeping, which other clients must not write.
const (
	cancelToken      = "x"
	cancelWriteToken = "cancel"
)

// cancelTransform is the schedule stream's subject transform: a cancel
// record written on P.S.N.p.<key>.x.<seq>.cancel is stored as
// P.S.N.p.<key>.x.<seq>. Every other subject is stored as written.
func (n jsNames) cancelTransform() *jetstream.SubjectTransformConfig {
	return &jetstream.SubjectTransformConfig{
		Source:      n.sSubj + ".*." + cancelToken + ".*." + cancelWriteToken,
		Destination: n.sSubj + ".{{wildcard(1)}}." + cancelToken + ".{{wildcard(2)}}",
	}
}

// schedSubjects lists the subjects a partition's schedule stream listens
// on, and no others, so that a publish anywhere else under its prefix is
// refused by the server instead of stored and never delivered: copies
// with and without MessageID (of a queue's messages: without session, or
// with one on a queue that requires sessions; on a topic, both, followed
// by the topic's filter tokens), scheduled messages, cancel records,
// session locks and (on a queue) state records.
func (n jsNames) schedSubjects(requiresSession bool) []string {
	var filter string
	for range n.tokens {
		filter += ".*"
	}
	var tails []string
	if n.topic || !requiresSession {
		tails = append(tails, ".m"+filter)
	}
	if n.topic || requiresSession {
		tails = append(tails, ".s.*"+filter)
	}
	var subs []string
	for _, kind := range []string{KindWithID, KindWithoutID} {
		for _, tail := range tails {
			subs = append(subs, n.sSubj+".*."+kind+tail)
		}
	}
	subs = append(subs, n.sSubj+".*."+ScheduleToken, n.sSubj+".*."+cancelToken+".*."+cancelWriteToken)
	if n.topic || requiresSession {
		subs = append(subs, n.lock+".>")
	}
	if n.vSubj != "" {
		subs = append(subs, n.vSubj+".>")
	}
	return subs
}

// maxDeliver is the receive consumer's MaxDeliver: the server delivers a
// message MaxDeliveryCount times at most, whoever receives it, and
// housekeeping moves it to the dead-letter queue then (see
// jsQueue.moveExhausted). A dead-letter queue's messages are delivered
// until settled.
func maxDeliver(cfg QueueConfig, n jsNames) int {
	if n.isDeadLetter {
		return -1
	}
	return cfg.MaxDeliveryCount
}

// targetSuffix is the subject tail a message is stored under: ".m", or
// ".s.<token>" for a session message.
func (q *jsQueue) targetSuffix(m *Message) string {
	if q.topic != nil {
		return q.topic.suffix(m)
	}
	if q.cfg.RequiresSession {
		return ".s." + subjectToken(m.SessionID)
	}
	return ".m"
}

// msgKey returns the subject token of a message in the schedule stream:
// a hash of its MessageID, so that every trace of one MessageID shares a
// subject prefix, or a fresh NUID for a message without one.
func msgKey(id string) string {
	if id == "" {
		return nuid.Next()
	}
	h := sha256.Sum256([]byte(id))
	return "_" + base64.RawURLEncoding.EncodeToString(h[:16])
}

// copySubject is the subject of the copy of m that the queue stream
// sources: an immediate send, or the activation of a schedule.
func (q *jsQueue) copySubject(part *jsPartition, key string, m *Message) string {
	kind := KindWithoutID
	if m.MessageID != "" {
		kind = KindWithID
	}
	return part.n.sSubj + "." + key + "." + kind + q.targetSuffix(m)
}

func sessionConsumerName(id string) string {
	h := sha256.Sum256([]byte(id))
	return "s_" + hex.EncodeToString(h[:16])
}

func sessionLockSubject(part *jsPartition, id string) string {
	return part.n.lock + "." + subjectToken(id)
}

// transformTail returns k single-token wildcards for a subject transform's
// source, and their references from wildcard number first on for its
// destination.
func transformTail(k, first int) (src, dst string) {
	for i := range k {
		src += ".*"
		dst += ".{{wildcard(" + strconv.Itoa(first+i) + ")}}"
	}
	return src, dst
}

func (d *jsDriver) topicNames(topic string, props, p int) jsNames {
	ps := strconv.Itoa(p)
	return jsNames{
		queue:  d.o.prefix + "_T_" + topic + "_" + ps,
		sched:  d.o.prefix + "_TS_" + topic + "_" + ps,
		qSubj:  d.o.prefix + ".T." + topic + "." + ps,
		sSubj:  d.o.prefix + ".TS." + topic + "." + ps,
		lock:   d.o.prefix + ".TL." + topic + "." + ps,
		hasSch: true,
		topic:  true,
		tokens: 1 + props,
	}
}

// subDeadLetterNames names a subscription's dead-letter queue. The
// topic's length keeps "T_S" unambiguous in the stream name.
func (d *jsDriver) subDeadLetterNames(topic, sub string) jsNames {
	return jsNames{
		queue:        d.o.prefix + "_SD_" + strconv.Itoa(len(topic)) + "_" + topic + "_" + sub,
		qSubj:        d.o.prefix + ".SD." + topic + "." + sub + ".0",
		isDeadLetter: true,
	}
}

func subConsumerName(sub string) string { return "U-" + sub }

func subSessionPrefix(sub string) string { return "S-" + sub + "-" }

func sessionFloorSubject(part *jsPartition, id string) string {
	return sessionLockSubject(part, id) + ".F"
}
