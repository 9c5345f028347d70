package timeout

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

var (
	// ErrNotFound is returned by Cancel when the timeout was cancelled
	// before, or the ref names nothing the engine scheduled.
	ErrNotFound = errors.New("timeout: not found")
	// ErrAlreadyFired is returned by Cancel when the timeout fired first:
	// its message has been or will be delivered.
	ErrAlreadyFired = errors.New("timeout: already fired")
	// ErrInvalidTimeout is returned by Schedule for a timeout without ID,
	// queue, due time or message.
	ErrInvalidTimeout = errors.New("timeout: invalid timeout")
	// ErrInvalidRef is returned by Cancel for a ref no engine issued.
	ErrInvalidRef = errors.New("timeout: invalid ref")
	// ErrUnavailable wraps an engine's failure to reach its server (the
	// NATS server, Temporal's frontend) or to get an answer: the same call
	// may work later. It is the same value as transport.ErrUnavailable
	// and saga.ErrUnavailable: a saga dispatcher waits through it instead
	// of counting it against a message's retries.
	ErrUnavailable = transport.ErrUnavailable
)

// Timeout is a message to deliver to a queue at or after a due time.
type Timeout struct {
	// ID identifies the timeout; scheduling the same ID twice (within the
	// engine's duplicate window) schedules it once. Required.
	ID string
	// Queue is the transport queue the message is delivered to. Required.
	Queue string
	// At is the due time. The message is never delivered before it —
	// except by a queue engine with early activation (the default on
	// JetStream, see WithEarlyActivation), whose messages reach the queue
	// up to its lead before At, for a receiver that holds them until At
	// (as the saga dispatcher does).
	At time.Time
	// Message is what is delivered. Its MessageID is set to ID.
	Message *transport.Message
	// Saga and Instance name who asked for the timeout: a saga type and
	// one of its instances (the saga package sets both). Optional. A
	// Router routes by Saga (Route.Sagas); listings (Lister) show both and
	// filter on them. Engines deliver them in the message's properties
	// PropertySaga and PropertyInstance.
	Saga, Instance string
	// Engine asks a Router for an engine by name ("queue", "temporal"),
	// whatever its routes say. Optional; other schedulers ignore it.
	Engine string
	// PartitionKey is the fairness key of whoever asked for the timeout
	// (a tenant, an account; the saga package sets its instance's key).
	// Optional. The delivered message carries it as its PartitionKey
	// unless Message has one of its own, so that on a queue with several
	// partitions a tenant's timeouts wait and come due in the tenant's
	// partition (transport.Message.PartitionKey), and a burst of one
	// key's timeouts does not delay the others'. The Temporal engine
	// ignores it: its timeouts wait in workflows, not partitions, and are
	// delivered without a key (to the partition their MessageID picks).
	PartitionKey string
}

// Properties the engines set on a timeout's message.
const (
	// PropertySaga carries Timeout.Saga.
	PropertySaga = "jetsaga-saga"
	// PropertyInstance carries Timeout.Instance.
	PropertyInstance = "jetsaga-saga-id"
	// PropertyDue carries Timeout.At (RFC 3339 with nanoseconds), so that
	// a receiver can tell how late a timeout arrived on any engine, and
	// until when to hold one activated early (WithEarlyActivation).
	PropertyDue = "jetsaga-timeout-due"
	// PropertyTimeout marks a scheduled message as a timeout, so that
	// listings tell timeouts from other scheduled messages on a queue; its
	// value is "1", or the name of the queue engine that scheduled it.
	PropertyTimeout = "jetsaga-timeout"
)

// DeliveryMessage returns the message an engine delivers for t: a copy of
// t.Message with MessageID set to t.ID and the properties PropertyTimeout,
// PropertyDue, PropertySaga and PropertyInstance set, and PartitionKey
// set to t.PartitionKey if it has neither a PartitionKey nor a SessionID,
// so that every engine delivers the same message.
func (t Timeout) DeliveryMessage() *transport.Message {
	m := *t.Message
	m.MessageID = t.ID
	if m.PartitionKey == "" && m.SessionID == "" {
		m.PartitionKey = t.PartitionKey
	}
	m.Properties = make(map[string]string, len(t.Message.Properties)+4)
	maps.Copy(m.Properties, t.Message.Properties)
	m.Properties[PropertyTimeout] = "1"
	m.Properties[PropertyDue] = t.At.UTC().Format(time.RFC3339Nano)
	if t.Saga != "" {
		m.Properties[PropertySaga] = t.Saga
	}
	if t.Instance != "" {
		m.Properties[PropertyInstance] = t.Instance
	}
	return &m
}

// Validate reports whether t can be scheduled: an error matching
// ErrInvalidTimeout if it lacks ID, Queue, At or Message.
func (t Timeout) Validate() error { return t.validate() }

func (t Timeout) validate() error {
	switch {
	case t.ID == "":
		return fmt.Errorf("%w: empty ID", ErrInvalidTimeout)
	case t.Queue == "":
		return fmt.Errorf("%w: empty Queue", ErrInvalidTimeout)
	case t.At.IsZero():
		return fmt.Errorf("%w: zero At", ErrInvalidTimeout)
	case t.Message == nil:
		return fmt.Errorf("%w: nil Message", ErrInvalidTimeout)
	}
	return nil
}

// Ref names a scheduled timeout for Cancel. It starts with the name of the
// engine that issued it ("queue:", "temporal:", ...), so that a Router
// can send Cancel to the right engine; treat the rest as opaque.
type Ref string

// Engine returns the engine prefix of r.
func (r Ref) Engine() string {
	e, _, _ := strings.Cut(string(r), ":")
	return e
}

// Scheduler arranges for timeouts to be delivered at or after their due
// time. Implementations: Queue (scheduled messages on a transport
// queue, the default), Router (several engines, by delay or saga type)
// and, in the nested module github.com/jetsaga/jetsaga/timeout/temporal,
// Temporal workflows for long timeouts.
type Scheduler interface {
	// Schedule is idempotent on t.ID and returns the ref Cancel takes.
	Schedule(ctx context.Context, t Timeout) (Ref, error)
	// Cancel stops a pending timeout. nil means it will never be
	// delivered; ErrAlreadyFired that it has been or will be; ErrNotFound
	// that nothing with this ref is pending.
	Cancel(ctx context.Context, ref Ref) error
}
