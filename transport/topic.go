package transport

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"time"
)

// TopicConfig describes a topic. OpenTopic creates the topic from it or
// updates an existing one; the zero value of each field picks its default.
type TopicConfig struct {
	// Name is 1–64 characters of [A-Za-z0-9_-]. Topics and queues have
	// separate name spaces. Required.
	Name string
	// Partitions splits the topic into independent logs, each with its own
	// gap-free sequence, as on a queue. Changing it is refused.
	// Default: 1. Maximum: 1024.
	Partitions int
	// FilterProperties names the application properties that subscription
	// filters may test (Filter.Properties), at most 8. Filters on other
	// properties are refused with ErrFilterNotDeclared. On JetStream their
	// values are part of each message's subject, which is what makes a
	// filter exact and cheap. Changing the list is refused.
	// Default: none.
	FilterProperties []string
	// DuplicateWindow is how long a MessageID is remembered, as on a queue.
	// Default: 10m.
	DuplicateWindow time.Duration
	// Replicas is the JetStream replication factor. Default: 1.
	Replicas int
	// MemoryStorage keeps JetStream data in memory. Default: false.
	MemoryStorage bool
	// CancelRecordTTL is how long the record of a cancellation is kept, as
	// on a queue. Default: 7 days.
	CancelRecordTTL time.Duration
}

// maxFilterProperties bounds TopicConfig.FilterProperties: each adds a
// token to every message's subject and to every filter subject.
const maxFilterProperties = 8

// maxFilterSubjects bounds Filter.Subjects.
const maxFilterSubjects = 16

func (c TopicConfig) withDefaults() (TopicConfig, QueueConfig, error) {
	if err := ValidateQueueName(c.Name); err != nil {
		return c, QueueConfig{}, err
	}
	if len(c.FilterProperties) > maxFilterProperties {
		return c, QueueConfig{}, fmt.Errorf("%w: %d FilterProperties, at most %d", ErrInvalidConfig, len(c.FilterProperties), maxFilterProperties)
	}
	c.FilterProperties = slices.Clone(c.FilterProperties)
	for i, k := range c.FilterProperties {
		if err := validPropKey(k); err != nil {
			return c, QueueConfig{}, fmt.Errorf("%w: FilterProperties: %w", ErrInvalidConfig, err)
		}
		if slices.Contains(c.FilterProperties[:i], k) {
			return c, QueueConfig{}, fmt.Errorf("%w: FilterProperties: %q listed twice", ErrInvalidConfig, k)
		}
	}
	qc, err := QueueConfig{
		Name:            c.Name,
		Partitions:      c.Partitions,
		DuplicateWindow: c.DuplicateWindow,
		Replicas:        c.Replicas,
		MemoryStorage:   c.MemoryStorage,
		CancelRecordTTL: c.CancelRecordTTL,
	}.withDefaults()
	if err != nil {
		return c, qc, err
	}
	c.Partitions, c.DuplicateWindow, c.Replicas, c.CancelRecordTTL = qc.Partitions, qc.DuplicateWindow, qc.Replicas, qc.CancelRecordTTL
	return c, qc, nil
}

// SubscriptionConfig describes a subscription of a topic.
type SubscriptionConfig struct {
	// Filter selects the messages the subscription gets. Changing it on an
	// existing subscription is refused; delete the subscription and open
	// it again. Default: every message.
	Filter Filter
	// RequiresSession makes the subscription deliver only messages with a
	// SessionID, through AcceptSession and AcceptNextSession, one at a
	// time per session, as on a session queue. Changing it is refused.
	// Default: false.
	RequiresSession bool
	// LockDuration is how long a received message stays locked, as on a
	// queue. Default: 30s.
	LockDuration time.Duration
	// MaxDeliveryCount is how many deliveries a message gets before it is
	// moved to the subscription's dead-letter queue. Default: 10.
	MaxDeliveryCount int
}

// Filter selects messages of a topic for a subscription, like a Service
// Bus correlation filter: a message passes if its Subject is one of
// Subjects (any Subject if Subjects is empty) and it carries every
// property of Properties with exactly that value. An empty Filter passes
// every message.
type Filter struct {
	// Subjects lists the message types (Message.Subject) that pass, at
	// most 16. Values are compared exactly; "" matches a message without
	// Subject. Default: empty, any type.
	Subjects []string
	// Properties are application properties that must be present with
	// exactly these values. Each key must be one of the topic's
	// FilterProperties, else the subscription is refused with
	// ErrFilterNotDeclared. Default: empty.
	Properties map[string]string
}

func (f Filter) equal(g Filter) bool {
	a, b := slices.Clone(f.Subjects), slices.Clone(g.Subjects)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b)) && maps.Equal(f.Properties, g.Properties)
}

// matches reports whether m passes f.
func (f Filter) matches(m *Message) bool {
	if len(f.Subjects) > 0 && !slices.Contains(f.Subjects, m.Subject) {
		return false
	}
	for k, v := range f.Properties {
		if got, ok := m.Properties[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func (c SubscriptionConfig) withDefaults(topic TopicConfig, name string) (SubscriptionConfig, QueueConfig, error) {
	if err := ValidateQueueName(name); err != nil {
		return c, QueueConfig{}, fmt.Errorf("subscription name: %w", err)
	}
	if len(c.Filter.Subjects) > maxFilterSubjects {
		return c, QueueConfig{}, fmt.Errorf("%w: %d filter subjects, at most %d", ErrInvalidConfig, len(c.Filter.Subjects), maxFilterSubjects)
	}
	for _, s := range c.Filter.Subjects {
		if err := validValue("filter subject", s); err != nil {
			return c, QueueConfig{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	for k, v := range c.Filter.Properties {
		if !slices.Contains(topic.FilterProperties, k) {
			return c, QueueConfig{}, fmt.Errorf("%w: property %q (topic %s declares %q)", ErrFilterNotDeclared, k, topic.Name, topic.FilterProperties)
		}
		if err := validValue("filter property "+k, v); err != nil {
			return c, QueueConfig{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	c.Filter.Subjects = slices.Clone(c.Filter.Subjects)
	slices.Sort(c.Filter.Subjects)
	c.Filter.Subjects = slices.Compact(c.Filter.Subjects)
	c.Filter.Properties = maps.Clone(c.Filter.Properties)
	qc, err := QueueConfig{
		Name:             topic.Name + subscriptionInfix + name,
		Partitions:       topic.Partitions,
		RequiresSession:  c.RequiresSession,
		LockDuration:     c.LockDuration,
		MaxDeliveryCount: c.MaxDeliveryCount,
		DuplicateWindow:  topic.DuplicateWindow,
		Replicas:         topic.Replicas,
		MemoryStorage:    topic.MemoryStorage,
		CancelRecordTTL:  topic.CancelRecordTTL,
	}.withDefaultsUnchecked()
	if err != nil {
		return c, qc, err
	}
	c.LockDuration, c.MaxDeliveryCount = qc.LockDuration, qc.MaxDeliveryCount
	return c, qc, nil
}

// withDefaultsUnchecked is withDefaults for a name that is not a queue
// name (a subscription's path).
func (c QueueConfig) withDefaultsUnchecked() (QueueConfig, error) {
	name := c.Name
	c.Name = "x"
	c, err := c.withDefaults()
	c.Name = name
	return c, err
}

// subscriptionInfix joins a topic's and a subscription's names into the
// subscription's path, as in Service Bus: "<topic>/Subscriptions/<name>".
const subscriptionInfix = "/Subscriptions/"

// Counts are a queue's, a topic's or a subscription's message counts, as
// Service Bus's runtime properties report them. The broker reads them
// without scanning messages (see Queue.Counts).
type Counts struct {
	// Active is the number of active messages: waiting for delivery or
	// locked by a receiver. On a topic, the messages that some
	// subscription has not completed yet.
	Active int64
	// Pending is, on a subscription, the number of active messages not
	// yet handed to a receiver (Active less those locked or awaiting
	// redelivery). 0 on queues and topics.
	Pending int64
	// Scheduled is the number of scheduled messages not yet activated or
	// cancelled. 0 on subscriptions: a scheduled message belongs to its
	// topic until it activates.
	Scheduled int64
	// DeadLettered is the number of messages in the dead-letter queue. 0
	// on topics, which have none (each subscription has its own).
	DeadLettered int64
}

// ErrTopicNotFound is returned for a topic or subscription that does not
// exist.
var ErrTopicNotFound = errors.New("transport: topic or subscription not found")

// ErrFilterNotDeclared is returned by OpenSubscription for a filter on an
// application property that the topic's FilterProperties do not list.
var ErrFilterNotDeclared = errors.New("transport: filter property not declared by the topic")

// topicBackend is what a driver offers for topics.
type topicBackend interface {
	openTopic(ctx context.Context, cfg TopicConfig, qc QueueConfig) (topicDriver, error)
	// attachTopic returns an existing topic and its config, or
	// ErrTopicNotFound.
	attachTopic(ctx context.Context, name string) (topicDriver, TopicConfig, error)
	deleteTopic(ctx context.Context, name string) error
}

// topicDriver is a topic: a queueDriver for sending, scheduling,
// cancelling and peeking, plus its subscriptions.
type topicDriver interface {
	queueDriver
	openSubscription(ctx context.Context, name string, cfg SubscriptionConfig, qc QueueConfig) (queueDriver, error)
	// attachSubscription returns an existing subscription and its config,
	// or ErrTopicNotFound.
	attachSubscription(ctx context.Context, name string) (queueDriver, SubscriptionConfig, error)
	deleteSubscription(ctx context.Context, name string) error
	subscriptions(ctx context.Context) ([]string, error)
}

func (b *Broker) topicBackend() topicBackend { return b.d.(topicBackend) }

// OpenTopic creates the topic cfg describes, or updates it to cfg if it
// exists; it is idempotent. It returns ErrInvalidQueueName or
// ErrInvalidConfig for a config it refuses, including a change of
// Partitions or FilterProperties.
func (b *Broker) OpenTopic(ctx context.Context, cfg TopicConfig) (*Topic, error) {
	cfg, qc, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	td, err := b.topicBackend().openTopic(ctx, cfg, qc)
	if err != nil {
		return nil, err
	}
	t := &Topic{cfg: cfg, q: &Queue{cfg: qc, d: td, b: b}, d: td}
	b.topics.Store(cfg.Name, t)
	return t, nil
}

// Topic returns the topic named name as it exists, without changing its
// configuration, or ErrTopicNotFound. The broker remembers the topics it
// opened or attached, so repeated calls are cheap.
func (b *Broker) Topic(ctx context.Context, name string) (*Topic, error) {
	if t, ok := b.topics.Load(name); ok {
		return t.(*Topic), nil
	}
	if err := ValidateQueueName(name); err != nil {
		return nil, err
	}
	td, cfg, err := b.topicBackend().attachTopic(ctx, name)
	if err != nil {
		return nil, err
	}
	_, qc, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	t, _ := b.topics.LoadOrStore(name, &Topic{cfg: cfg, q: &Queue{cfg: qc, d: td, b: b}, d: td})
	return t.(*Topic), nil
}

// DeleteTopic removes a topic, its subscriptions, their dead-letter
// queues and all their messages, scheduled ones included. Deleting a
// missing topic is not an error.
func (b *Broker) DeleteTopic(ctx context.Context, name string) error {
	if err := ValidateQueueName(name); err != nil {
		return err
	}
	b.topics.Delete(name)
	return b.topicBackend().deleteTopic(ctx, name)
}

// OpenSubscription opens the subscription name of the topic named topic
// (which must exist: ErrTopicNotFound), creating it if needed. It is
// idempotent: with the same config it returns the same subscription, so
// a service can call it at every start. See Topic.OpenSubscription.
func (b *Broker) OpenSubscription(ctx context.Context, topic, name string, cfg SubscriptionConfig) (*Subscription, error) {
	t, err := b.Topic(ctx, topic)
	if err != nil {
		return nil, err
	}
	return t.OpenSubscription(ctx, name, cfg)
}

// Topic is a topic opened on a Broker: messages sent to it reach each of
// its subscriptions whose filter they pass. It is safe for concurrent use.
type Topic struct {
	cfg TopicConfig
	q   *Queue // sending, scheduling, cancelling and peeking, as on a queue
	d   topicDriver
}

// Name returns the topic's name.
func (t *Topic) Name() string { return t.cfg.Name }

// Config returns the topic's config with defaults filled in.
func (t *Topic) Config() TopicConfig { return t.cfg }

// Send publishes m to the topic, as Queue.Send stores it in a queue: it
// reaches every subscription that exists when it enters the topic and
// whose filter it passes, each with the same (topic) sequence number and
// EnqueuedAt. With ScheduledAt set it is scheduled, as Schedule does.
func (t *Topic) Send(ctx context.Context, m *Message) (SendResult, error) {
	return t.q.Send(ctx, m)
}

// Schedule stores m to be published at time at and returns its scheduled
// sequence number, as Queue.Schedule does. On activation it enters the
// topic once and reaches every matching subscription with the same
// sequence number.
func (t *Topic) Schedule(ctx context.Context, m *Message, at time.Time) (uint64, error) {
	return t.q.Schedule(ctx, m, at)
}

// Cancel deletes a scheduled message, with the definite outcomes of
// Queue.Cancel: nil, ErrAlreadyActivated or ErrNotFound.
func (t *Topic) Cancel(ctx context.Context, seq uint64) error { return t.q.Cancel(ctx, seq) }

// CancelMany cancels several scheduled messages, as Queue.CancelMany.
func (t *Topic) CancelMany(ctx context.Context, seqs []uint64) []error {
	return t.q.CancelMany(ctx, seqs)
}

// Peek returns up to max of the topic's messages, active and scheduled,
// from sequence number from, as Queue.Peek. The active ones are those
// some subscription has not completed yet: a message that no
// subscription's filter passed, or that every subscription has
// completed or dead-lettered, is gone (its sequence number stays used).
func (t *Topic) Peek(ctx context.Context, from uint64, max int) ([]*Message, error) {
	return t.q.Peek(ctx, from, max)
}

// Browse iterates over the topic's messages from sequence number from on,
// as Peek returns them.
func (t *Topic) Browse(ctx context.Context, from uint64) iter.Seq2[*Message, error] {
	return t.q.Browse(ctx, from)
}

// Counts returns the topic's counts: Active (messages some subscription
// has not completed) and Scheduled. See Queue.Counts and the package
// documentation for what it costs.
func (t *Topic) Counts(ctx context.Context) (Counts, error) { return t.q.Counts(ctx) }

// OpenSubscription creates the subscription name (1–64 characters of
// [A-Za-z0-9_-]) with cfg, or returns it if it exists with the same
// Filter and RequiresSession (LockDuration and MaxDeliveryCount are
// updated to cfg's). A different Filter or RequiresSession is refused
// with ErrInvalidConfig; a filter on a property the topic does not
// declare with ErrFilterNotDeclared. Processes that open one subscription
// at once each get one of these answers: all open it, or, with different
// filters, one opens it and the others get ErrInvalidConfig (on a busy
// cluster that can take a while, see the package documentation; a
// context deadline bounds it).
//
// A new subscription gets every message that enters the topic after
// OpenSubscription returns (a scheduled message enters when it
// activates), perhaps some that entered while it ran, and none that
// entered before it was called. On JetStream a sent message enters the
// topic a moment after Send returns.
func (t *Topic) OpenSubscription(ctx context.Context, name string, cfg SubscriptionConfig) (*Subscription, error) {
	cfg, qc, err := cfg.withDefaults(t.cfg, name)
	if err != nil {
		return nil, err
	}
	sd, err := t.d.openSubscription(ctx, name, cfg, qc)
	if err != nil {
		return nil, err
	}
	return &Subscription{name: name, topic: t, cfg: cfg, q: &Queue{cfg: qc, d: sd, b: t.q.b}}, nil
}

// Subscription returns the existing subscription name, or
// ErrTopicNotFound.
func (t *Topic) Subscription(ctx context.Context, name string) (*Subscription, error) {
	if err := ValidateQueueName(name); err != nil {
		return nil, fmt.Errorf("subscription name: %w", err)
	}
	sd, cfg, err := t.d.attachSubscription(ctx, name)
	if err != nil {
		return nil, err
	}
	cfg, qc, err := cfg.withDefaults(t.cfg, name)
	if err != nil {
		return nil, err
	}
	return &Subscription{name: name, topic: t, cfg: cfg, q: &Queue{cfg: qc, d: sd, b: t.q.b}}, nil
}

// DeleteSubscription removes a subscription, its dead-letter queue and
// the messages only it still needed; other subscriptions lose nothing.
// Deleting a missing subscription is not an error.
func (t *Topic) DeleteSubscription(ctx context.Context, name string) error {
	if err := ValidateQueueName(name); err != nil {
		return fmt.Errorf("subscription name: %w", err)
	}
	return t.d.deleteSubscription(ctx, name)
}

// Subscriptions lists the names of the topic's subscriptions, sorted.
func (t *Topic) Subscriptions(ctx context.Context) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		names, err := t.d.subscriptions(ctx)
		if err != nil {
			yield("", err)
			return
		}
		slices.Sort(names)
		for _, n := range names {
			if !yield(n, nil) {
				return
			}
		}
	}
}

// Subscription is a subscription of a topic: a queue of its own, fed by
// the topic with the messages that pass its filter, each carrying the
// topic's sequence number and EnqueuedAt. It is received from like a
// queue (peek-lock, sessions, delivery count, dead-letter queue); it is
// safe for concurrent use.
type Subscription struct {
	name  string
	topic *Topic
	cfg   SubscriptionConfig
	q     *Queue
}

// Name returns the subscription's name.
func (s *Subscription) Name() string { return s.name }

// Path returns "<topic>/Subscriptions/<name>", the name its dead-lettered
// messages carry in DeadLetterSource.
func (s *Subscription) Path() string { return s.q.cfg.Name }

// Topic returns the subscription's topic.
func (s *Subscription) Topic() *Topic { return s.topic }

// Config returns the subscription's config with defaults filled in.
func (s *Subscription) Config() SubscriptionConfig { return s.cfg }

// Receive waits for messages and returns between 1 and max of them, as
// Queue.Receive. On a subscription with RequiresSession it returns
// ErrSessionRequired.
func (s *Subscription) Receive(ctx context.Context, max int) ([]*Delivery, error) {
	return s.q.Receive(ctx, max)
}

// ReceiveFrom is Receive from some of the subscription's partitions
// only, as Queue.ReceiveFrom.
func (s *Subscription) ReceiveFrom(ctx context.Context, max int, partitions []int) ([]*Delivery, error) {
	return s.q.ReceiveFrom(ctx, max, partitions)
}

// AcceptSession holds one session of the subscription exclusively, as
// Queue.AcceptSession.
func (s *Subscription) AcceptSession(ctx context.Context, sessionID string) (*SessionReceiver, error) {
	return s.q.AcceptSession(ctx, sessionID)
}

// AcceptNextSession accepts a session with messages that no receiver
// holds, as Queue.AcceptNextSession.
func (s *Subscription) AcceptNextSession(ctx context.Context) (*SessionReceiver, error) {
	return s.q.AcceptNextSession(ctx)
}

// Peek returns up to max of the subscription's active messages from
// sequence number from (a topic sequence number), as Queue.Peek.
func (s *Subscription) Peek(ctx context.Context, from uint64, max int) ([]*Message, error) {
	return s.q.Peek(ctx, from, max)
}

// Browse iterates over the subscription's active messages from sequence
// number from on.
func (s *Subscription) Browse(ctx context.Context, from uint64) iter.Seq2[*Message, error] {
	return s.q.Browse(ctx, from)
}

// DeadLetterQueue returns the subscription's dead-letter queue, named
// "<topic>/Subscriptions/<name>/$DeadLetterQueue". It can be browsed and
// received from like any queue.
func (s *Subscription) DeadLetterQueue() *Queue { return s.q.DeadLetterQueue() }

// Counts returns the subscription's counts: Active, Pending and
// DeadLettered.
func (s *Subscription) Counts(ctx context.Context) (Counts, error) { return s.q.Counts(ctx) }

// Counts returns the queue's counts: Active (waiting or locked),
// Scheduled, and DeadLettered, read from the broker's own bookkeeping,
// never by scanning messages. They are exact at the instant each is read
// and never negative, also while cancellations race activations. On
// JetStream Active and DeadLettered are the streams' message counts and
// Scheduled a count the server keeps for a consumer that filters the
// schedule stream's schedules: one API call per partition for each, in
// constant time whatever the number of messages (see the package
// documentation for figures). A message sent a moment ago may not be
// counted yet (it is on its way into the queue, see Send).
func (q *Queue) Counts(ctx context.Context) (Counts, error) { return q.d.counts(ctx) }

// filterToken encodes a message type or a property value as one NATS
// subject token: absent ("-"), its base64url encoding ("_" prefix), or,
// above 48 bytes, a hash of it ("~" prefix). The base64url alphabet has
// no '.', '*', '>' or space, so a hostile value never becomes a wildcard
// or splits into tokens; the three prefixes keep the forms apart.
func filterToken(v string, present bool) string {
	switch {
	case !present:
		return "-"
	case len(v) <= 48:
		return subjectToken(v)
	}
	h := sha256.Sum256([]byte(v))
	return "~" + base64.RawURLEncoding.EncodeToString(h[:18])
}

// filterTokens returns the tokens of m's type and of the topic's filter
// properties, joined by dots.
func filterTokens(props []string, m *Message) string {
	b := filterToken(m.Subject, m.Subject != "")
	for _, k := range props {
		v, ok := m.Properties[k]
		b += "." + filterToken(v, ok)
	}
	return b
}

// filterPatterns returns the subject tails (after the session part) that
// f passes, with '*' for a property f does not test.
func filterPatterns(props []string, f Filter) []string {
	types := []string{"*"}
	if len(f.Subjects) > 0 {
		types = types[:0]
		for _, s := range f.Subjects {
			types = append(types, filterToken(s, s != ""))
		}
	}
	var out []string
	for _, ty := range types {
		p := ty
		for _, k := range props {
			if v, ok := f.Properties[k]; ok {
				p += "." + filterToken(v, true)
			} else {
				p += ".*"
			}
		}
		out = append(out, p)
	}
	return out
}
