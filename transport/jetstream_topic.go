package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Topics on JetStream. With prefix P, topic T and partition p:
//
//	stream P_TS_T_p   every write, as a queue's schedule stream (see
//	                  jsNames), copies on P.TS.T.p.<key>.f|g.<tail>
//	stream P_T_T_p    the topic's messages (interest retention), on no
//	                  subject of its own: sourced from P_TS_T_p, as
//	            P.T.T.p.m.<type>.<v1>...<vk>        a message without session
//	            P.T.T.p.s.<sid>.<type>.<v1>...<vk>  a message of session sid
//	stream P_SD_<n>_T_S  subject P.SD.T.S.0.m: the dead-letter queue of
//	                  subscription S (n: length of T)
//
// <type> and <vi> are filterToken encodings of the message's Subject and
// of the values of the topic's k FilterProperties. A subscription S is a
// durable consumer "U-S" on each partition's topic stream whose
// FilterSubjects are its filter's patterns, delivering new messages only:
// the topic stream keeps a message while some subscription's consumer
// has not acknowledged it, and drops at once one that no filter passes.
// Session locks of S live on P.TL.T.p.~S.<sid>, session floors on
// P.TL.T.p.~S.<sid>.F (see collectSession).

type jsTopicShape struct {
	// copyTTL is the per-message TTL of the copies of sent and activated
	// messages in the schedule stream: receivers purge them once sourced
	// (as on a queue), but a topic may have no receiver, or no
	// subscription at all, and the copies must not pile up then. It is
	// max(DuplicateWindow, CancelRecordTTL): a copy must outlive its
	// duplicate window, and a topic stream unavailable for that long
	// would lose what it had not sourced yet.
	copyTTL  string
	props    []string
	sub      string // the subscription's name, "" on the topic itself
	cfg      SubscriptionConfig
	patterns []string        // the subscription's filter patterns
	handover []*handoverTime // per partition, on a session subscription
}

func (t *jsTopicShape) suffix(m *Message) string {
	s := ".m."
	if m.SessionID != "" {
		s = ".s." + subjectToken(m.SessionID) + "."
	}
	return s + filterTokens(t.props, m)
}

func copyTTL(cfg TopicConfig) string {
	return strconv.FormatInt(int64((max(cfg.DuplicateWindow, cfg.CancelRecordTTL)+time.Second-1)/time.Second), 10) + "s"
}

const (
	metaTopic        = "jetsaga.topic"
	metaSubscription = "jetsaga.subscription"
)

type jsTopic struct {
	*jsQueue
	tcfg TopicConfig
}

// Topics have no receivers, and take no settlements.
func (t *jsTopic) receive(context.Context, int, []bool) ([]*Delivery, error) {
	return nil, ErrUnsupported
}
func (t *jsTopic) acceptSession(context.Context, string, int) (sessionDriver, error) {
	return nil, ErrUnsupported
}
func (t *jsTopic) nextSession(context.Context) (string, error) { return "", ErrUnsupported }
func (t *jsTopic) deadLetter() queueDriver                     { return nil }

func (d *jsDriver) openTopic(ctx context.Context, cfg TopicConfig, qc QueueConfig) (topicDriver, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	_, old, err := d.attachTopic(ctx, cfg.Name)
	switch {
	case errors.Is(err, ErrTopicNotFound):
	case err != nil:
		return nil, err
	case old.Partitions != cfg.Partitions || !slices.Equal(old.FilterProperties, cfg.FilterProperties):
		return nil, fmt.Errorf("%w: topic %q has Partitions %d and FilterProperties %q, config asks for %d and %q",
			ErrInvalidConfig, cfg.Name, old.Partitions, old.FilterProperties, cfg.Partitions, cfg.FilterProperties)
	}
	meta, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	t := d.newTopic(cfg, qc)
	for p := range cfg.Partitions {
		// Each partition a step of its own (see newQueue).
		part, err := openStep(ctx, d, fmt.Sprintf("topic %s partition %d", cfg.Name, p), func(ctx context.Context) (*jsPartition, error) {
			n := d.topicNames(cfg.Name, len(cfg.FilterProperties), p)
			for _, name := range []string{n.sched, n.queue} {
				s, err := d.js.Stream(ctx, name)
				if err == nil {
					if err := refuseLossyLimits(s.CachedInfo().Config); err != nil {
						return nil, err
					}
				} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
					return nil, d.mapErr(err)
				}
			}
			n.meta = map[string]string{metaTopic: string(meta)}
			return d.provision(ctx, qc, n, p)
		})
		if err != nil {
			return nil, err
		}
		t.parts = append(t.parts, part)
	}
	return t, nil
}

func (d *jsDriver) newTopic(cfg TopicConfig, qc QueueConfig) *jsTopic {
	return &jsTopic{
		jsQueue: &jsQueue{d: d, cfg: qc, topic: &jsTopicShape{props: cfg.FilterProperties, copyTTL: copyTTL(cfg)}},
		tcfg:    cfg,
	}
}

func (d *jsDriver) attachTopic(ctx context.Context, name string) (topicDriver, TopicConfig, error) {
	if err := d.check(); err != nil {
		return nil, TopicConfig{}, err
	}
	s, err := openStep(ctx, d, "topic "+name, func(ctx context.Context) (jetstream.Stream, error) {
		return d.js.Stream(ctx, d.topicNames(name, 0, 0).queue)
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, TopicConfig{}, fmt.Errorf("%w: topic %s", ErrTopicNotFound, name)
	}
	if err != nil {
		return nil, TopicConfig{}, d.mapErr(err)
	}
	var cfg TopicConfig
	if err := json.Unmarshal([]byte(s.CachedInfo().Config.Metadata[metaTopic]), &cfg); err != nil || cfg.Name != name {
		return nil, TopicConfig{}, fmt.Errorf("%w: stream %s has no jetsaga topic config; open it with OpenTopic", ErrInvalidConfig, s.CachedInfo().Config.Name)
	}
	cfg, qc, err := cfg.withDefaults()
	if err != nil {
		return nil, TopicConfig{}, err
	}
	t := d.newTopic(cfg, qc)
	for p := range cfg.Partitions {
		part, err := openStep(ctx, d, fmt.Sprintf("topic %s partition %d", name, p), func(ctx context.Context) (*jsPartition, error) {
			return d.lookup(ctx, qc, d.topicNames(name, len(cfg.FilterProperties), p), p)
		})
		if err != nil {
			return nil, TopicConfig{}, err
		}
		t.parts = append(t.parts, part)
	}
	return t, cfg, nil
}

func (d *jsDriver) deleteTopic(ctx context.Context, name string) error {
	if err := d.check(); err != nil {
		return err
	}
	// The subscriptions' dead-letter queues go too.
	actx, cancel := d.apiContext(ctx)
	defer cancel()
	l := d.js.StreamNames(actx, jetstream.WithStreamListSubject(d.o.prefix+".SD."+name+".*.0.>"))
	var dls []string
	for s := range l.Name() {
		dls = append(dls, s)
	}
	if err := l.Err(); err != nil {
		return d.mapErr(err)
	}
	return d.deleteStreams(ctx, func(p int) jsNames { return d.topicNames(name, 0, p) }, dls...)
}

// jsSubscription is a subscription: a jsQueue whose partitions read the
// topic's streams through the subscription's consumers.
type jsSubscription struct {
	*jsQueue
	patterns []string // subject filters, one per partition-less tail
}

func (s *jsSubscription) send(context.Context, *Message, int) (SendResult, error) {
	return SendResult{}, fmt.Errorf("%w: send to a subscription (send to its topic)", ErrUnsupported)
}

func (s *jsSubscription) schedule(context.Context, *Message, int, time.Time) (SendResult, error) {
	return SendResult{}, fmt.Errorf("%w: schedule on a subscription (schedule on its topic)", ErrUnsupported)
}

func (s *jsSubscription) cancel(context.Context, uint64) error {
	return fmt.Errorf("%w: cancel on a subscription (cancel on its topic)", ErrUnsupported)
}

// filterSubjects returns the subscription's consumer filters on partition
// n: its patterns after the session part.
func filterSubjects(n jsNames, cfg SubscriptionConfig, patterns []string) []string {
	var out []string
	for _, p := range patterns {
		if !cfg.RequiresSession {
			out = append(out, n.qSubj+".m."+p)
		}
		out = append(out, n.qSubj+".s.*."+p)
	}
	return out
}

func (t *jsTopic) subQueue(name string, cfg SubscriptionConfig, qc QueueConfig) *jsSubscription {
	patterns := filterPatterns(t.tcfg.FilterProperties, cfg.Filter)
	shape := &jsTopicShape{props: t.tcfg.FilterProperties, sub: name, cfg: cfg, patterns: patterns}
	for range t.parts {
		shape.handover = append(shape.handover, &handoverTime{})
	}
	q := &jsQueue{d: t.d, cfg: qc, sessions: make(map[string]jetstream.Consumer), topic: shape}
	return &jsSubscription{jsQueue: q, patterns: patterns}
}

func (t *jsTopic) openSubscription(ctx context.Context, name string, cfg SubscriptionConfig, qc QueueConfig) (queueDriver, error) {
	d := t.d
	if err := d.check(); err != nil {
		return nil, err
	}
	meta, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	s := t.subQueue(name, cfg, qc)
	for _, tp := range t.parts {
		cc := jetstream.ConsumerConfig{
			Durable:        subConsumerName(name),
			Description:    "jetsaga subscription " + name,
			FilterSubjects: filterSubjects(tp.n, cfg, s.patterns),
			AckPolicy:      jetstream.AckExplicitPolicy,
			AckWait:        serverAckWait(cfg.LockDuration),
			MaxDeliver:     -1,
			MaxAckPending:  -1,
			// After the topic stream's last message (see createSubConsumer).
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
			Metadata:      map[string]string{metaSubscription: string(meta)},
		}
		if cfg.RequiresSession {
			// The consumer holds the messages until they are handed over
			// to their sessions' consumers, which start where it started.
			cc.Description = "jetsaga session subscription " + name + ": hands messages over to session consumers"
			cc.AckWait = handoverAckWait
		}
		// Each partition a step of its own, and the dead-letter queue (see
		// newQueue).
		c, err := openStep(ctx, d, fmt.Sprintf("subscription %s partition %d", name, tp.idx), func(ctx context.Context) (jetstream.Consumer, error) {
			return t.createSubConsumer(ctx, tp, cc, name, cfg)
		})
		if err != nil {
			return nil, err
		}
		s.parts = append(s.parts, t.subPartition(tp, name, c))
	}
	if _, err := openStep(ctx, d, "dead-letter queue of subscription "+name, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, t.subDeadLetter(ctx, s, name, qc, d.provision)
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// createSubConsumer creates the consumer of subscription name on tp, or
// updates it if it exists with the same Filter and RequiresSession (else
// ErrInvalidConfig); one that already has the config asked for is left
// alone, as ensureStream leaves a stream (processes that open a
// subscription at once would each send an update, each a proposal of the
// meta leader on a cluster). An existing consumer keeps its start; a new
// one starts after the topic stream's last message as the stream's leader
// (which answers stream info) has it. Not DeliverNew: the server starts
// such a consumer after the last message of its own replica of the
// stream, and on a replicated stream the consumer's leader may be a
// follower that has not stored the latest messages yet, so the
// subscription would get messages that entered the topic before it was
// opened. Processes that open the subscription at once agree: creating
// fails for all but one, which then find its consumer (on a cluster
// perhaps only after a while: it asks again after a pause).
func (t *jsTopic) createSubConsumer(ctx context.Context, tp *jsPartition, cc jetstream.ConsumerConfig, name string, cfg SubscriptionConfig) (jetstream.Consumer, error) {
	d := t.d
	for pause := openBackoff; ; pause = min(2*pause, time.Second) {
		old, err := tp.queue.Consumer(ctx, cc.Durable)
		if err == nil {
			oc := old.CachedInfo().Config
			var osc SubscriptionConfig
			if json.Unmarshal([]byte(oc.Metadata[metaSubscription]), &osc) == nil &&
				(!osc.Filter.equal(cfg.Filter) || osc.RequiresSession != cfg.RequiresSession) {
				return nil, fmt.Errorf("%w: subscription %q of topic %q exists with Filter %+v and RequiresSession %t",
					ErrInvalidConfig, name, t.tcfg.Name, osc.Filter, osc.RequiresSession)
			}
			// The start cannot change (subscriptions made by older
			// versions are DeliverNew).
			cc.DeliverPolicy, cc.OptStartSeq = oc.DeliverPolicy, oc.OptStartSeq
			if sameSubConsumer(oc, cc) {
				return old, nil
			}
			c, err := tp.queue.UpdateConsumer(ctx, cc)
			return c, d.mapErr(err)
		}
		if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, d.mapErr(err)
		}
		info, err := tp.queue.Info(ctx)
		if err != nil {
			return nil, d.mapErr(err)
		}
		cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, info.State.LastSeq+1
		c, err := tp.queue.CreateConsumer(ctx, cc)
		if !errors.Is(err, jetstream.ErrConsumerExists) {
			return c, d.mapErr(err)
		}
		select {
		case <-ctx.Done():
			return nil, d.mapErr(context.Cause(ctx))
		case <-time.After(pause):
		}
	}
}

// consumerFilters returns c's subject filters, in FilterSubject or
// FilterSubjects (the server may move a single one from one to the other).
func consumerFilters(c jetstream.ConsumerConfig) []string {
	if c.FilterSubject != "" {
		return append([]string{c.FilterSubject}, c.FilterSubjects...)
	}
	return c.FilterSubjects
}

// sameSubConsumer reports whether the existing consumer config old has
// everything a subscription's consumer config cc sets.
func sameSubConsumer(old, cc jetstream.ConsumerConfig) bool {
	return old.Durable == cc.Durable && old.Description == cc.Description &&
		slices.Equal(consumerFilters(old), consumerFilters(cc)) &&
		old.AckPolicy == cc.AckPolicy && old.AckWait == cc.AckWait &&
		old.MaxDeliver == cc.MaxDeliver && old.MaxAckPending == cc.MaxAckPending &&
		old.DeliverPolicy == cc.DeliverPolicy && old.OptStartSeq == cc.OptStartSeq &&
		old.Metadata[metaSubscription] == cc.Metadata[metaSubscription]
}

// subPartition is a subscription's view of topic partition tp: the same
// streams, read through consumer c. It keeps tp's replicated: receivers
// then watch the topic stream's sourcing (checkSourcing) and look cancel
// records up on the leader (direct gets are off on replicated streams).
func (t *jsTopic) subPartition(tp *jsPartition, name string, c jetstream.Consumer) *jsPartition {
	n := tp.n
	n.lock = tp.n.lock + ".~" + name
	return &jsPartition{idx: tp.idx, n: n, queue: tp.queue, sched: tp.sched, cons: c, replicated: tp.replicated, partKeep: tp.partKeep}
}

func (t *jsTopic) subDeadLetter(ctx context.Context, s *jsSubscription, name string, qc QueueConfig,
	part func(context.Context, QueueConfig, jsNames, int) (*jsPartition, error)) error {
	dl, err := part(ctx, qc, t.d.subDeadLetterNames(t.tcfg.Name, name), 0)
	if err != nil {
		return err
	}
	dlCfg := qc
	dlCfg.Name += DeadLetterSuffix
	dlCfg.Partitions, dlCfg.RequiresSession = 1, false
	s.dlq = &jsQueue{d: t.d, cfg: dlCfg, parts: []*jsPartition{dl}, isDLQ: true}
	s.dlq.dlq = s.dlq
	return nil
}

func (t *jsTopic) attachSubscription(ctx context.Context, name string) (queueDriver, SubscriptionConfig, error) {
	d := t.d
	if err := d.check(); err != nil {
		return nil, SubscriptionConfig{}, err
	}
	var cfg SubscriptionConfig
	var s *jsSubscription
	for _, tp := range t.parts {
		c, err := openStep(ctx, d, fmt.Sprintf("subscription %s partition %d", name, tp.idx), func(ctx context.Context) (jetstream.Consumer, error) {
			return tp.queue.Consumer(ctx, subConsumerName(name))
		})
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, cfg, fmt.Errorf("%w: subscription %s of topic %s", ErrTopicNotFound, name, t.tcfg.Name)
		}
		if err != nil {
			return nil, cfg, d.mapErr(err)
		}
		if s == nil {
			if err := json.Unmarshal([]byte(c.CachedInfo().Config.Metadata[metaSubscription]), &cfg); err != nil {
				return nil, cfg, fmt.Errorf("%w: consumer %s has no jetsaga subscription config", ErrInvalidConfig, subConsumerName(name))
			}
			var qc QueueConfig
			var err error
			if cfg, qc, err = cfg.withDefaults(t.tcfg, name); err != nil {
				return nil, cfg, err
			}
			s = t.subQueue(name, cfg, qc)
		}
		s.parts = append(s.parts, t.subPartition(tp, name, c))
	}
	if _, err := openStep(ctx, d, "dead-letter queue of subscription "+name, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, t.subDeadLetter(ctx, s, name, s.cfg, d.lookup)
	}); err != nil {
		return nil, cfg, err
	}
	return s, cfg, nil
}

func (t *jsTopic) deleteSubscription(ctx context.Context, name string) error {
	d := t.d
	if err := d.check(); err != nil {
		return err
	}
	ctx, cancel := d.apiContext(ctx)
	defer cancel()
	for _, tp := range t.parts {
		var names []string
		l := tp.queue.ConsumerNames(ctx)
		for c := range l.Name() {
			if c == subConsumerName(name) || strings.HasPrefix(c, subSessionPrefix(name)) {
				names = append(names, c)
			}
		}
		if err := l.Err(); err != nil {
			return d.mapErr(err)
		}
		for _, c := range names {
			if err := tp.queue.DeleteConsumer(ctx, c); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				return d.mapErr(err)
			}
		}
	}
	// Session locks and floors.
	for _, tp := range t.parts {
		if err := tp.sched.Purge(ctx, jetstream.WithPurgeSubject(tp.n.lock+".~"+name+".>")); err != nil {
			return d.mapErr(err)
		}
	}
	err := d.js.DeleteStream(ctx, d.subDeadLetterNames(t.tcfg.Name, name).queue)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	return d.mapErr(err)
}

func (t *jsTopic) subscriptions(ctx context.Context) ([]string, error) {
	d := t.d
	if err := d.check(); err != nil {
		return nil, err
	}
	ctx, cancel := d.apiContext(ctx)
	defer cancel()
	var out []string
	l := t.parts[0].queue.ConsumerNames(ctx)
	for c := range l.Name() {
		if name, ok := strings.CutPrefix(c, "U-"); ok {
			out = append(out, name)
		}
	}
	if err := l.Err(); err != nil {
		return nil, d.mapErr(err)
	}
	return out, nil
}

// peek lists the subscription's active messages: those of the topic
// stream above each consumer's ack floor that pass its filter.
func (s *jsSubscription) peek(ctx context.Context, from uint64, limit int) ([]*Message, error) {
	if err := s.d.check(); err != nil {
		return nil, err
	}
	var out []*Message
	for p := Partition(from); p < len(s.parts) && len(out) < limit; p++ {
		part := s.parts[p]
		if from > makeSeq(p, false, seqMask) {
			continue
		}
		info, err := part.cons.Info(ctx)
		if err != nil {
			return nil, s.d.mapErr(err)
		}
		// The consumer delivers nothing below its start. Info of a
		// replicated consumer just created may come from a replica that
		// has no state yet (the server answers with zero floors then).
		start := max(info.AckFloor.Stream+1, info.Config.OptStartSeq)
		if s.cfg.RequiresSession {
			// The subscription's consumer acknowledges what it hands over:
			// start from the oldest session's ack floor instead.
			cis, err := s.sessionConsumers(ctx, part)
			if err != nil {
				return nil, err
			}
			for _, ci := range cis {
				if ci.NumPending+uint64(ci.NumAckPending) > 0 {
					start = min(start, max(ci.AckFloor.Stream+1, ci.Config.OptStartSeq))
				}
			}
		}
		if low := makeSeq(p, false, 0); from > low {
			start = max(start, LocalSeq(from))
		}
		filters := info.Config.FilterSubjects
		for len(out) < limit {
			raw, err := part.queue.GetMsg(ctx, start, jetstream.WithGetMsgSubject(part.n.qSubj+".>"))
			if isNotFound(err) {
				break
			}
			if err != nil {
				return nil, s.d.mapErr(err)
			}
			start = raw.Sequence + 1
			if slices.ContainsFunc(filters, func(f string) bool { return subjectMatches(f, raw.Subject) }) {
				out = append(out, rawMessage(raw, p, false))
			}
		}
	}
	return out, nil
}

// subjectMatches reports whether subject matches filter, whose tokens may
// be '*' (no '>': the transport's filters have none).
func subjectMatches(filter, subject string) bool {
	for {
		f, fr, fok := strings.Cut(filter, ".")
		s, sr, sok := strings.Cut(subject, ".")
		if f != "*" && f != s {
			return false
		}
		if !fok || !sok {
			return fok == sok
		}
		filter, subject = fr, sr
	}
}

func (s *jsSubscription) counts(ctx context.Context) (Counts, error) {
	if err := s.d.check(); err != nil {
		return Counts{}, err
	}
	ctx, cancel := s.d.apiContext(ctx)
	defer cancel()
	var c Counts
	add := func(ci *jetstream.ConsumerInfo) {
		c.Active += int64(ci.NumPending) + int64(ci.NumAckPending)
		c.Pending += int64(ci.NumPending)
	}
	for _, part := range s.parts {
		if s.cfg.RequiresSession {
			// A message not handed over yet is held by the subscription's
			// consumer, and perhaps also counted by its session's: hand
			// everything over, then count the sessions' consumers.
			if err := s.handOver(ctx, part); err != nil {
				return Counts{}, err
			}
			cis, err := s.sessionConsumers(ctx, part)
			if err != nil {
				return Counts{}, err
			}
			for _, ci := range cis {
				add(ci)
			}
			continue
		}
		info, err := part.cons.Info(ctx)
		if err != nil {
			return Counts{}, s.d.mapErr(err)
		}
		add(info)
	}
	info, err := s.dlq.parts[0].queue.Info(ctx)
	if err != nil {
		return Counts{}, s.d.mapErr(err)
	}
	c.DeadLettered = int64(info.State.Msgs)
	return c, nil
}

// counts of a topic: first each session subscription hands its messages
// over, so that a message completed on a session's consumer no longer
// counts as held by the topic; then the streams' counts.
func (t *jsTopic) counts(ctx context.Context) (Counts, error) {
	names, err := t.subscriptions(ctx)
	if err != nil {
		return Counts{}, err
	}
	for _, name := range names {
		sd, cfg, err := t.attachSubscription(ctx, name)
		if errors.Is(err, ErrTopicNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return Counts{}, err
		}
		if !cfg.RequiresSession {
			continue
		}
		s := sd.(*jsSubscription)
		for _, part := range s.parts {
			if err := s.handOver(ctx, part); err != nil {
				return Counts{}, err
			}
		}
	}
	return t.jsQueue.counts(ctx)
}
