package cli

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/jetsaga/jetsaga/transport"
)

// subscriptionsSegment separates a topic from a subscription in an
// entity path, as in Service Bus: "events/Subscriptions/billing".
const subscriptionsSegment = "/Subscriptions/"

// browsable is what browse reads: a queue, a topic, a subscription, or a
// dead-letter queue.
type browsable interface {
	Browse(ctx context.Context, from uint64) iter.Seq2[*transport.Message, error]
}

// sender is where resubmit sends: a queue or a topic.
type sender interface {
	Send(ctx context.Context, m *transport.Message) (transport.SendResult, error)
}

// entity is what a QUEUE argument names: a queue, a topic's subscription
// ("events/Subscriptions/billing"), or the dead-letter queue of either
// (the path followed by "/$DeadLetterQueue").
type entity struct {
	path string                  // without the dead-letter suffix
	q    *transport.Queue        // the queue, for a queue
	sub  *transport.Subscription // the subscription, for a subscription
	dead bool                    // the argument named the dead-letter queue
}

// browsed is what the argument names: the entity or its dead-letter
// queue.
func (x entity) browsed() (browsable, string) {
	if x.dead {
		dlq := x.deadLetters()
		return dlq, dlq.Name()
	}
	if x.sub != nil {
		return x.sub, x.path
	}
	return x.q, x.path
}

// deadLetters is the entity's dead-letter queue.
func (x entity) deadLetters() *transport.Queue {
	if x.sub != nil {
		return x.sub.DeadLetterQueue()
	}
	return x.q.DeadLetterQueue()
}

// entity opens the existing queue or subscription arg names (see entity);
// it never creates one.
func (e *env) entity(ctx context.Context, arg string) (entity, error) {
	name, dead := queueArg(arg)
	if topic, sub, ok := strings.Cut(name, subscriptionsSegment); ok {
		s, err := e.subscription(ctx, topic, sub)
		if err != nil {
			return entity{}, err
		}
		return entity{path: s.Path(), sub: s, dead: dead}, nil
	}
	q, err := e.queue(ctx, name)
	if err != nil {
		return entity{}, err
	}
	return entity{path: name, q: q, dead: dead}, nil
}

// topic returns an existing topic, or an error matching ErrNotFound.
func (e *env) topic(ctx context.Context, name string) (*transport.Topic, error) {
	if err := transport.ValidateQueueName(name); err != nil {
		return nil, fmt.Errorf("%w: topic name: %v", ErrUsage, err)
	}
	t, err := e.broker.Topic(ctx, name)
	if errors.Is(err, transport.ErrTopicNotFound) {
		return nil, fmt.Errorf("%w: topic %q (prefix %s)", ErrNotFound, name, e.prefix)
	}
	return t, err
}

// subscription returns an existing subscription, or an error matching
// ErrNotFound.
func (e *env) subscription(ctx context.Context, topic, name string) (*transport.Subscription, error) {
	t, err := e.topic(ctx, topic)
	if err != nil {
		return nil, err
	}
	if err := transport.ValidateQueueName(name); err != nil {
		return nil, fmt.Errorf("%w: subscription name: %v", ErrUsage, err)
	}
	s, err := t.Subscription(ctx, name)
	if errors.Is(err, transport.ErrTopicNotFound) {
		return nil, fmt.Errorf("%w: subscription %q of topic %q", ErrNotFound, name, topic)
	}
	return s, err
}

// deadLetterStream is the stream of the entity's dead-letter queue; the
// transport documents the layout (P_D_N for queue N, P_SD_<len(T)>_T_S for
// subscription S of topic T).
func (e *env) entityDeadLetterStream(x entity) string {
	if x.sub != nil {
		t := x.sub.Topic().Name()
		return e.prefix + "_SD_" + strconv.Itoa(len(t)) + "_" + t + "_" + x.sub.Name()
	}
	return e.deadLetterStream(x.path)
}

// TopicInfo is a topic with its counts and subscriptions.
type TopicInfo struct {
	Name             string   `json:"name"`
	Partitions       int      `json:"partitions"`
	FilterProperties []string `json:"filter_properties,omitempty"`
	// Active is the number of messages some subscription has not
	// completed yet; Scheduled those not activated or cancelled yet
	// (transport.Counts).
	Active        uint64             `json:"active"`
	Scheduled     uint64             `json:"scheduled"`
	Subscriptions []SubscriptionInfo `json:"subscriptions"`
}

// SubscriptionInfo is a subscription with its filter and counts.
type SubscriptionInfo struct {
	Name            string     `json:"name"`
	Path            string     `json:"path"` // TOPIC/Subscriptions/NAME
	Filter          FilterView `json:"filter"`
	RequiresSession bool       `json:"requires_session"`
	// Active counts the messages waiting or locked; Pending those not
	// handed to a receiver yet; DeadLettered those in its dead-letter
	// queue (transport.Counts).
	Active       uint64 `json:"active"`
	Pending      uint64 `json:"pending"`
	DeadLettered uint64 `json:"dead_lettered"`
}

// listTopicNames lists the topics under the prefix, by name.
func (e *env) listTopicNames(ctx context.Context) ([]string, error) {
	var out []string
	lister := e.js.ListStreams(ctx) // by name: topic streams listen on no subject
	for si := range lister.Info() {
		var cfg transport.TopicConfig
		if json.Unmarshal([]byte(si.Config.Metadata["jetsaga.topic"]), &cfg) == nil && cfg.Name != "" &&
			si.Config.Name == e.prefix+"_T_"+cfg.Name+"_0" {
			out = append(out, cfg.Name)
		}
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("listing streams: %w", err)
	}
	slices.Sort(out)
	return out, nil
}

// listTopics lists the topics with their counts and subscriptions.
func (e *env) listTopics(ctx context.Context) ([]TopicInfo, error) {
	names, err := e.listTopicNames(ctx)
	if err != nil {
		return nil, err
	}
	out := []TopicInfo{}
	for _, name := range names {
		t, err := e.broker.Topic(ctx, name)
		if errors.Is(err, transport.ErrTopicNotFound) {
			continue // deleted at this instant
		}
		if err != nil {
			return nil, err
		}
		ti, err := topicInfo(ctx, t)
		if err != nil {
			return nil, err
		}
		out = append(out, ti)
	}
	return out, nil
}

func topicInfo(ctx context.Context, t *transport.Topic) (TopicInfo, error) {
	cfg := t.Config()
	c, err := t.Counts(ctx)
	if err != nil {
		return TopicInfo{}, err
	}
	ti := TopicInfo{Name: t.Name(), Partitions: cfg.Partitions, FilterProperties: cfg.FilterProperties,
		Active: uint64(c.Active), Scheduled: uint64(c.Scheduled), Subscriptions: []SubscriptionInfo{}}
	for name, err := range t.Subscriptions(ctx) {
		if err != nil {
			return TopicInfo{}, err
		}
		s, err := t.Subscription(ctx, name)
		if errors.Is(err, transport.ErrTopicNotFound) {
			continue // deleted at this instant
		}
		if err != nil {
			return TopicInfo{}, err
		}
		c, err := s.Counts(ctx)
		if err != nil {
			return TopicInfo{}, err
		}
		sc := s.Config()
		ti.Subscriptions = append(ti.Subscriptions, SubscriptionInfo{Name: name, Path: s.Path(),
			Filter:          FilterView{Subjects: sc.Filter.Subjects, Properties: sc.Filter.Properties},
			RequiresSession: sc.RequiresSession, Active: uint64(c.Active), Pending: uint64(c.Pending), DeadLettered: uint64(c.DeadLettered)})
	}
	return ti, nil
}

// FilterView is a subscription's transport.Filter: a message passes if
// its Subject is one of Subjects (any if empty) and it carries every
// property of Properties with that value.
type FilterView struct {
	Subjects   []string          `json:"subjects,omitempty"`
	Properties map[string]string `json:"properties,omitempty"`
}

// String shows the filter: "Subject=a|b region=eu", or "all".
func (f FilterView) String() string {
	var parts []string
	if len(f.Subjects) > 0 {
		parts = append(parts, "Subject="+strings.Join(f.Subjects, "|"))
	}
	for _, k := range slices.Sorted(maps.Keys(f.Properties)) {
		parts = append(parts, k+"="+f.Properties[k])
	}
	if len(parts) == 0 {
		return "all"
	}
	return strings.Join(parts, " ")
}

// endpointQueue returns the queue of the saga endpoint whose subscription
// sub is, if it looks like one ("<queue>-<8 hex digits>", as saga.WithTopic
// names it) and that queue exists.
func (e *env) endpointQueue(ctx context.Context, sub string) (string, bool) {
	i := strings.LastIndexByte(sub, '-')
	if i < 1 || len(sub)-i-1 != 8 {
		return "", false
	}
	if _, err := hex.DecodeString(sub[i+1:]); err != nil {
		return "", false
	}
	q := sub[:i]
	if _, err := e.queue(ctx, q); err != nil {
		return "", false
	}
	return q, true
}

func cmdTopicsList(c *call) error {
	ts, err := c.env.listTopics(c.ctx)
	if err != nil {
		return err
	}
	return c.out(ts, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "TOPIC / SUBSCRIPTION\tPARTITIONS\tACTIVE\tPENDING\tSCHEDULED\tDEAD-LETTERED\tFILTER")
		for _, t := range ts {
			fmt.Fprintf(w, "%s\t%d\t%d\t-\t%d\t-\t%s\n", t.Name, t.Partitions, t.Active, t.Scheduled,
				dash(strings.Join(t.FilterProperties, ",")))
			for _, s := range t.Subscriptions {
				fmt.Fprintf(w, "  %s\t-\t%d\t%d\t-\t%d\t%s\n", s.Path, s.Active, s.Pending, s.DeadLettered, s.Filter)
			}
		}
		if len(ts) == 0 {
			fmt.Fprintln(w, "no topics")
		}
	})
}

func cmdTopicsBrowse(c *call) error {
	page, err := c.browseTopic()
	if err != nil {
		return err
	}
	return c.outPage(page)
}

func cmdTopicsPeek(c *call) error {
	if len(c.args) == 2 {
		c.o.from = c.args[1]
	}
	page, err := c.browseTopic()
	if err != nil {
		return err
	}
	return c.outPeek(page)
}

// browseTopic browses the topic the first argument names.
func (c *call) browseTopic() (BrowsePage, error) {
	t, err := c.env.topic(c.ctx, c.args[0])
	if err != nil {
		return BrowsePage{}, err
	}
	return c.browseOf(t, t.Name(), false)
}

func cmdTopicsCancel(c *call) error {
	t, err := c.env.topic(c.ctx, c.args[0])
	if err != nil {
		return err
	}
	return c.cancel(t, "topic "+t.Name())
}
