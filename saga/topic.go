package saga

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// ErrNoTopic is returned by Dispatcher.Publish on a dispatcher without a
// topic (WithTopic).
var ErrNoTopic = errors.New("saga: no topic (WithTopic)")

// maxEventTypes is how many message types one endpoint's subscription
// filters on (transport.Filter takes at most 16 subjects).
const maxEventTypes = 16

// WithTopic makes the dispatcher an endpoint of topic cfg (opened, or
// created, with cfg as transport.Broker.OpenTopic does):
//
//   - Context.Publish (and Dispatcher.Publish) sends events to the topic,
//     with the event's type as the message's Subject;
//   - Run subscribes the endpoint to the types its sagas start or handle,
//     and receives them beside its queue.
//
// The subscription is named after the queue and the set of types, so an
// endpoint added later receives events from then on without the
// publisher changing, and every process of one endpoint shares one
// subscription (competing receivers, each event handled once per
// endpoint). When a new version of the endpoint handles other types, Run
// opens the subscription of the new set first, then drains the old one
// (handling what it still holds) and deletes it: nothing is lost of a
// type both versions handle. At most 16 types per endpoint.
//
// WithSubscribers keeps working beside it: Publish also sends to the
// queues listed there.
func WithTopic(cfg transport.TopicConfig) Option {
	return optionFunc(func(c *config) error {
		if err := transport.ValidateQueueName(cfg.Name); err != nil {
			return fmt.Errorf("%w: topic: %w", ErrInvalidOption, err)
		}
		c.topic = &cfg
		return nil
	})
}

// Publish publishes m to the dispatcher's topic, encoded as sagas'
// events are, for code outside sagas. A MessageID option makes retries
// of the same call idempotent within the topic's duplicate window.
func (d *Dispatcher) Publish(ctx context.Context, m any, opts ...SendOption) (transport.SendResult, error) {
	t, err := d.openTopic(ctx)
	if err != nil {
		return transport.SendResult{}, err
	}
	e, err := d.envelope(m, opts)
	if err != nil {
		return transport.SendResult{}, err
	}
	return t.Send(ctx, eventMessage(e))
}

// openTopic opens the dispatcher's topic (creating it or updating it to
// the WithTopic config) once; later calls return it. ErrNoTopic without
// WithTopic.
func (d *Dispatcher) openTopic(ctx context.Context) (*transport.Topic, error) {
	if d.cfg.topic == nil {
		return nil, ErrNoTopic
	}
	d.topicMu.Lock()
	defer d.topicMu.Unlock()
	if d.topic == nil {
		t, err := d.broker.OpenTopic(ctx, *d.cfg.topic)
		if err != nil {
			return nil, err
		}
		d.topic = t
	}
	return d.topic, nil
}

// eventTypes lists the types the endpoint subscribes to: those its sagas
// start or handle (not their timeouts), sorted.
func (d *Dispatcher) eventTypes() []string {
	var out []string
	for typ, rts := range d.byType {
		for _, rt := range rts {
			if kind, ok := rt.lookup(typ); ok && kind != routeTimeout {
				out = append(out, typ)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// subscriptionName names the endpoint's subscription for types:
// the queue's name (cut to fit) and a hash of the types.
func subscriptionName(queue string, types []string) string {
	h := sha256.Sum256([]byte(strings.Join(types, "\n")))
	return subscriptionPrefix(queue) + hex.EncodeToString(h[:4])
}

func subscriptionPrefix(queue string) string {
	return queue[:min(len(queue), 55)] + "-"
}

// isOlderSubscription reports whether name is a subscription of the
// endpoint for another set of types.
func isOlderSubscription(queue, name, current string) bool {
	rest, ok := strings.CutPrefix(name, subscriptionPrefix(queue))
	if !ok || name == current || len(rest) != 8 {
		return false
	}
	_, err := hex.DecodeString(rest)
	return err == nil
}

// endpointSub is a subscription the dispatcher receives from; old ones
// are drained and deleted.
type endpointSub struct {
	s   *transport.Subscription
	old bool
}

// subscribe opens the endpoint's subscription (and finds older ones to
// drain); none without WithTopic or without event types.
func (d *Dispatcher) subscribe(ctx context.Context) ([]endpointSub, error) {
	if d.cfg.topic == nil {
		return nil, nil
	}
	t, err := d.openTopic(ctx)
	if err != nil {
		return nil, err
	}
	types := d.eventTypes()
	if len(types) == 0 {
		return nil, nil
	}
	name := subscriptionName(d.queueName, types)
	cur, err := t.OpenSubscription(ctx, name, transport.SubscriptionConfig{
		Filter:           transport.Filter{Subjects: types},
		LockDuration:     d.cfg.queue.LockDuration,
		MaxDeliveryCount: d.cfg.queue.MaxDeliveryCount,
	})
	if err != nil {
		return nil, fmt.Errorf("saga: subscribing %s to topic %s: %w", d.queueName, t.Name(), err)
	}
	subs := []endpointSub{{s: cur}}
	for other, err := range t.Subscriptions(ctx) {
		if err != nil {
			return nil, err
		}
		if !isOlderSubscription(d.queueName, other, name) {
			continue
		}
		s, err := t.Subscription(ctx, other)
		if errors.Is(err, transport.ErrTopicNotFound) {
			continue // another process drained it meanwhile
		}
		if err != nil {
			return nil, err
		}
		subs = append(subs, endpointSub{s: s, old: true})
	}
	return subs, nil
}

// runSubscription receives from s with a quarter of the dispatcher's
// concurrency (at least one worker). An old subscription is received
// from until it is empty, then deleted.
func (d *Dispatcher) runSubscription(ctx context.Context, r *runner, s endpointSub) {
	n := max(1, d.cfg.concurrency/4)
	if !s.old {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() { d.worker(ctx, r, nil, s.s, s.s.Topic().Config().Partitions, s.s.Config().LockDuration) })
		}
		wg.Wait()
		return
	}
	for ctx.Err() == nil {
		c, err := s.s.Counts(ctx)
		if err == nil && c.Active == 0 && c.Pending == 0 {
			if err := s.s.Topic().DeleteSubscription(ctx, s.s.Name()); err == nil || errors.Is(err, transport.ErrTopicNotFound) {
				d.cfg.logger.LogAttrs(ctx, slog.LevelInfo, "saga: drained and deleted the subscription of an earlier version of the endpoint",
					slog.String("queue", d.queueName), slog.String("subscription", s.s.Path()))
				return
			}
		}
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		d.worker(dctx, r, nil, s.s, s.s.Topic().Config().Partitions, s.s.Config().LockDuration)
		cancel()
	}
}
