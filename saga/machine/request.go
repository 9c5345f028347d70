package machine

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// Requestable is a Request of any message types, as Activity.Request
// takes it.
type Requestable[S any] interface{ requestOf() *request[S] }

type request[S any] struct {
	machine                           string
	name, queue                       string
	timeout                           time.Duration
	build                             func(c *saga.Context[S]) any
	completed, faulted, expired, late string
}

// Request is a request a machine sends to a queue and waits for:
// Activity.Request sends it and starts its timeout; then exactly one of
// Completed (the response), Faulted (a Fault) and TimeoutExpired is raised
// for it, also when the response and the timeout race: whichever step
// commits first clears the pending request (Status.Requests), cancels or
// drops the other, and a response that arrives after the timeout, or
// after the request was replaced, is raised as Late — never as Completed.
//
// The request travels with a CorrelationID that names it and the
// instance's ReplyTo queue (the dispatcher's own); a responder answers
// to ReplyTo with that CorrelationID — saga.Context.Reply does both — and
// a Fault for a failure (NewFault). The CorrelationID carries the
// instance's ID, so a responder that knows nothing of the saga, and
// echoes only the request's CorrelationID, is answered: as MassTransit
// correlates a response by its RequestId header.
type Request[S, Req, Resp any] struct {
	r *request[S]
	// Completed is raised for the request's response.
	Completed Event[S, Resp]
	// Faulted is raised for a Fault in answer to the request.
	Faulted Event[S, Fault]
	// TimeoutExpired is raised when the timeout expires before a
	// response or a fault; never for a request whose timeout is zero.
	TimeoutExpired Event[S, Expired]
	// Late is raised for a response that arrives when its request is no
	// longer pending: after its timeout or fault, or after the request
	// was sent again (its CorrelationID is not the pending one's). Where
	// Late is not bound (When(r.Late)), such a response is dropped: the
	// message is completed and the instance does not change. It never
	// follows the unhandled policy, and is never Completed. A late Fault
	// is dropped.
	Late Event[S, Resp]
}

func (r *Request[S, Req, Resp]) requestOf() *request[S] { return r.r }

// Fault is the answer of a responder that cannot handle a request: sent to
// the request's ReplyTo with its CorrelationID, it raises the request's
// Faulted event. NewFault makes one.
type Fault struct {
	// Request is the request's CorrelationID; empty, the CorrelationID
	// the Fault carries is read instead.
	Request string `json:"request"`
	Reason  string `json:"reason"`
}

// MessageName is the name Faults travel under.
func (Fault) MessageName() string { return "jetsaga.machine.Fault" }

// NewFault returns the Fault answering req, the received request, for
// reason. Send it to req.ReplyTo with saga.WithCorrelationID(req.CorrelationID)
// (or saga.Context.Reply, which does both).
func NewFault(req *transport.Message, reason string) Fault {
	return Fault{Request: req.CorrelationID, Reason: reason}
}

// Expired is the message of a request's TimeoutExpired event.
type Expired struct {
	// Request is the request's name; ID its CorrelationID.
	Request string `json:"request"`
	ID      string `json:"id"`
}

// MessageName is the name request timeouts travel under.
func (Expired) MessageName() string { return "jetsaga.machine.Expired" }

// NewRequest declares the request name (1–64 characters of
// [A-Za-z0-9_-]): build makes its message, sent to queue; it expires
// after timeout, or never for a timeout of zero (MassTransit's
// TimeSpan.Zero: TimeoutExpired is not raised, and the request is pending
// until its response or fault). Its responses, of type Resp, find their
// instance by the request's CorrelationID they carry (find nil: one
// without a machine request's CorrelationID is dead-lettered, matching
// saga.ErrCorrelation), or with find, which reads the body. Resp is one
// event of the machine (its message type bound once).
func NewRequest[S, Req, Resp any](m *Machine[S], name, queue string, timeout time.Duration, build func(c *saga.Context[S]) Req, find saga.Finder[Resp]) *Request[S, Req, Resp] {
	if !namePattern.MatchString(name) {
		m.fail(fmt.Errorf("%w: request name %q: 1-64 characters of [A-Za-z0-9_-]", ErrInvalidMachine, name))
	}
	if timeout < 0 || build == nil {
		m.fail(fmt.Errorf("%w: request %s: needs a timeout of zero (none) or more and a build function", ErrInvalidMachine, name))
	}
	if find == nil {
		find = byRequestID[Resp]
	}
	if err := transport.ValidateQueueName(queue); err != nil {
		m.fail(fmt.Errorf("%w: request %s: queue: %w", ErrInvalidMachine, name, err))
	}
	p := "request/" + name + "/"
	rq := &request[S]{
		machine: m.name, name: name, queue: queue, timeout: timeout,
		build:     func(c *saga.Context[S]) any { return build(c) },
		completed: p + "Completed", faulted: p + "Faulted", expired: p + "TimeoutExpired", late: p + "Late",
	}
	resp := saga.MessageName[Resp]()
	m.claimType(resp, rq.completed)
	m.addEvent(&eventInfo[S]{key: rq.completed, label: name + ".Completed", kind: kindCompleted, msgName: resp})
	m.addEvent(&eventInfo[S]{key: rq.faulted, label: name + ".Faulted", kind: kindFaulted, msgName: Fault{}.MessageName()})
	m.addEvent(&eventInfo[S]{key: rq.expired, label: name + ".TimeoutExpired", kind: kindExpired})
	m.addEvent(&eventInfo[S]{key: rq.late, label: name + ".Late", kind: kindLate})
	m.requests = append(m.requests, rq)
	m.registrars = append(m.registrars, func(d *saga.Definition[S]) {
		saga.Handles(d, find, func(ctx context.Context, c *saga.Context[S], msg Resp) error {
			in := instanceOf(c)
			p, ok := in.Machine.Requests[name]
			if !ok || c.Incoming().CorrelationID != p.ID {
				return m.late(ctx, c, in, rq.late, msg)
			}
			c.CancelTimeout(p.Timeout)
			delete(in.Machine.Requests, name)
			return m.handle(ctx, c, rq.completed, msg)
		})
	})
	return &Request[S, Req, Resp]{
		r:              rq,
		Completed:      Event[S, Resp]{key: rq.completed},
		Faulted:        Event[S, Fault]{key: rq.faulted},
		TimeoutExpired: Event[S, Expired]{key: rq.expired},
		Late:           Event[S, Resp]{key: rq.late},
	}
}

// byRequestID finds the instance of a response by the CorrelationID it
// carries, its request's.
func byRequestID[Resp any](ctx context.Context, _ Resp) (string, error) {
	var corr string
	if in := saga.IncomingMessage(ctx); in != nil {
		corr = in.CorrelationID
	}
	_, id, ok := parseToken(corr)
	if !ok {
		return "", saga.Permanent(fmt.Errorf("%w: response with CorrelationID %.64q, not a machine request's", saga.ErrCorrelation, corr))
	}
	return id, nil
}

// token is a request's CorrelationID: machine/request/seq/instance.
func (r *request[S]) token(seq uint64, id string) string {
	return r.machine + "/" + r.name + "/" + strconv.FormatUint(seq, 10) + "/" + id
}

// parseToken returns the request name and the instance ID of a token.
func parseToken(tok string) (name, id string, ok bool) {
	parts := strings.SplitN(tok, "/", 4)
	if len(parts) != 4 || parts[3] == "" {
		return "", "", false
	}
	return parts[1], parts[3], true
}

func (r *request[S]) send(c *saga.Context[S], in *Instance) error {
	if p, ok := in.Machine.Requests[r.name]; ok {
		c.CancelTimeout(p.Timeout)
	}
	in.Machine.Seq++
	tok := r.token(in.Machine.Seq, c.ID())
	if err := c.Send(r.queue, r.build(c), saga.WithCorrelationID(tok), saga.WithReplyTo(c.Queue())); err != nil {
		return err
	}
	var h saga.TimeoutHandle
	if r.timeout > 0 {
		var err error
		if h, err = c.RequestTimeout(r.timeout, Expired{Request: r.name, ID: tok}); err != nil {
			return err
		}
	}
	if in.Machine.Requests == nil {
		in.Machine.Requests = make(map[string]Pending)
	}
	in.Machine.Requests[r.name] = Pending{ID: tok, Timeout: h}
	return nil
}

// registerRequestRoutes adds the routes every request shares: faults and
// timeouts.
func (m *Machine[S]) registerRequestRoutes(d *saga.Definition[S]) {
	byName := make(map[string]*request[S], len(m.requests))
	for _, r := range m.requests {
		byName[r.name] = r
	}
	findFault := func(ctx context.Context, f Fault) (string, error) {
		if f.Request == "" {
			return byRequestID(ctx, f)
		}
		_, id, ok := parseToken(f.Request)
		if !ok {
			return "", fmt.Errorf("%w: fault for request %.64q, not a machine request's CorrelationID", saga.ErrCorrelation, f.Request)
		}
		return id, nil
	}
	saga.Handles(d, findFault, func(ctx context.Context, c *saga.Context[S], f Fault) error {
		in := instanceOf(c)
		if f.Request == "" {
			f.Request = c.Incoming().CorrelationID
		}
		name, _, _ := parseToken(f.Request)
		r, known := byName[name]
		p, ok := in.Machine.Requests[name]
		if !known || !ok || p.ID != f.Request {
			return m.finish(ctx, c, in) // a late fault: dropped
		}
		c.CancelTimeout(p.Timeout)
		delete(in.Machine.Requests, name)
		return m.handle(ctx, c, r.faulted, f)
	})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[S], e Expired) error {
		in := instanceOf(c)
		r, known := byName[e.Request]
		p, ok := in.Machine.Requests[e.Request]
		if !known || !ok || p.ID != e.ID || p.Timeout != c.Timeout() {
			return m.finish(ctx, c, in) // stale: answered or replaced
		}
		delete(in.Machine.Requests, e.Request)
		return m.handle(ctx, c, r.expired, e)
	})
}
