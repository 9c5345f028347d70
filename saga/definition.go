package saga

import (
	"context"
	"fmt"

	"github.com/jetsaga/jetsaga/transport"
)

// Definition describes a saga type whose data is S: its name, the
// messages that start it, those it handles, and its timeouts. Build it
// with Define and the functions StartedBy, Handles and OnTimeout, once,
// at program start; register it with a Dispatcher (WithSagas) or a
// sagatest environment.
type Definition[S any] struct {
	name     string
	routes   map[string]route[S]
	notFound NotFoundPolicy
	engine   string
	liveness bool // CheckLiveness
	err      error

	partitionKey func(id string) string // PartitionKeyBy

	version   int        // DataVersion; 0 is 1
	upcasters []Upcaster // upcasters[i]: version i+1 to i+2

	machine *machineDescription // DescribeStates (catalog.go)

	indexes []index[S] // Index, IndexValues (index.go)
}

// Handler handles a message of type M for a saga with data S. It reads and
// changes c.Data and asks for effects through c; the effects take place
// only if the step commits.
type Handler[S, M any] func(ctx context.Context, c *Context[S], m M) error

// Finder maps a message to the ID of the saga instance it belongs to. Use
// By for the common case, a property of the message.
type Finder[M any] func(ctx context.Context, m M) (string, error)

// By returns a Finder that takes the instance ID from a property of m.
func By[M any](id func(m M) string) Finder[M] {
	return func(_ context.Context, m M) (string, error) { return id(m), nil }
}

type route[S any] struct {
	kind    routeKind
	find    func(ctx context.Context, m any) (string, error)
	decode  func(c Codec, body []byte) (any, error)
	handler func(ctx context.Context, c *Context[S], m any) error
	catchUp catchUp // timeouts
	late    func(ctx context.Context, c *Context[S], m any, l Lateness) error
}

type routeKind int

const (
	routeStart routeKind = iota + 1
	routeHandle
	routeTimeout
)

// NotFoundPolicy says what happens to a message that a saga handles but
// that starts no instance and finds none: the instance never existed, or
// it completed (its tombstone is kept for the retention, see
// WithCompletedRetention), or the tombstone expired.
type NotFoundPolicy struct {
	// DeadLetter moves the message to the dead-letter queue with reason
	// ReasonSagaNotFound. Default: false, the message is completed and
	// logged at Debug level (a late message for a finished saga is normal).
	DeadLetter bool
	// Handler, if set, is called instead of either, with the message and
	// a NotFoundContext that tells whether the instance completed and can
	// send and reply. It changes no state: there is no instance to
	// commit. Its messages are sent after it returns nil, with IDs fixed
	// by the message it handles, so that a redelivery sends them again
	// only to be deduplicated (within the destination's DuplicateWindow).
	// Its error fails the step as a handler error would: retried, then
	// dead-lettered.
	Handler func(ctx context.Context, c *NotFoundContext, m any) error
	// Hook, if set and Handler is not, is called instead of DeadLetter;
	// its error fails the step as a handler error would.
	//
	// Deprecated: use Handler, which can tell a completed instance from
	// one that never existed, and send.
	Hook func(ctx context.Context, sagaName, id string, m any) error
}

// Define starts a saga definition. name identifies the saga type in the
// store and in timeout messages: 1–64 characters of [A-Za-z0-9_-], stable
// for the saga's lifetime.
func Define[S any](name string, opts ...DefinitionOption) *Definition[S] {
	d := &Definition[S]{name: name, routes: make(map[string]route[S])}
	if err := transport.ValidateQueueName(name); err != nil {
		d.err = fmt.Errorf("%w: name %q: 1-64 characters of [A-Za-z0-9_-]", ErrInvalidDefinition, name)
	}
	var cfg definitionConfig
	for _, o := range opts {
		o(&cfg)
	}
	d.notFound, d.engine = cfg.notFound, cfg.engine
	d.version, d.upcasters = cfg.version, cfg.upcasters
	d.liveness, d.partitionKey = cfg.liveness, cfg.partitionKey
	if cfg.err != nil && d.err == nil {
		d.err = fmt.Errorf("%w: saga %s: %w", ErrInvalidDefinition, name, cfg.err)
	}
	return d
}

type definitionConfig struct {
	notFound  NotFoundPolicy
	engine    string
	version   int
	upcasters []Upcaster
	liveness  bool
	err       error // of an option given an invalid value

	partitionKey func(id string) string
}

// DefinitionOption configures a Definition.
type DefinitionOption func(*definitionConfig)

// WhenNotFound sets the saga-not-found policy.
func WhenNotFound(p NotFoundPolicy) DefinitionOption {
	return func(c *definitionConfig) { c.notFound = p }
}

// TimeoutEngine asks for the saga's timeouts to go to the named engine of
// the dispatcher's timeout.Router ("queue" for the transport, "temporal"
// for the Temporal engine), whatever the router's routes say. A
// dispatcher whose timeout scheduler is not a Router ignores it; NewDispatcher
// refuses a Router without that engine. Prefer routes (timeout.Route.Sagas),
// which keep the choice out of the definition.
func TimeoutEngine(name string) DefinitionOption {
	return func(c *definitionConfig) { c.engine = name }
}

// StartedBy makes messages of type M start an instance of d (or, if the
// instance exists, be handled by it). find maps a message to its instance
// ID; two starters with the same ID racing yield one instance.
func StartedBy[S, M any](d *Definition[S], find Finder[M], h Handler[S, M]) {
	addRoute(d, routeStart, find, h)
}

// Handles makes messages of type M be handled by an existing instance of
// d, found by find. A message for a missing instance follows d's
// NotFoundPolicy.
func Handles[S, M any](d *Definition[S], find Finder[M], h Handler[S, M]) {
	addRoute(d, routeHandle, find, h)
}

// OnTimeout makes timeouts with payload type T, requested with
// Context.RequestTimeout, be handled by h. A timeout that arrives after it
// was cancelled or rescheduled, or after the saga completed, is dropped.
//
// Options set the type's catch-up policy: what happens to a timeout of
// type T handled more than a tolerance after its due time, because the
// server or the dispatchers were down, the queue backed up, or the
// timeout moved between engines (see CatchUp and HandleLate). Default: it
// is handled by h, however late.
func OnTimeout[S, T any](d *Definition[S], h Handler[S, T], opts ...TimeoutOption) {
	addRoute[S, T](d, routeTimeout, nil, h)
	name := MessageName[T]()
	r := d.routes[name]
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(&r.catchUp); err != nil && d.err == nil {
			d.err = fmt.Errorf("%w: saga %s: OnTimeout %s: %w", ErrInvalidDefinition, d.name, name, err)
		}
	}
	if r.catchUp.late != nil {
		lh, ok := r.catchUp.late.(LateHandler[S, T])
		if !ok && d.err == nil {
			d.err = fmt.Errorf("%w: saga %s: OnTimeout %s: HandleLate's handler is a %T, want a saga.LateHandler[%T, %s]", ErrInvalidDefinition, d.name, name, r.catchUp.late, *new(S), name)
		}
		if ok {
			r.late = func(ctx context.Context, c *Context[S], m any, l Lateness) error { return lh(ctx, c, m.(T), l) }
		}
	}
	if r.catchUp.policy == CatchUpLate && r.late == nil && d.err == nil {
		d.err = fmt.Errorf("%w: saga %s: OnTimeout %s: the late policy needs a handler: use HandleLate", ErrInvalidDefinition, d.name, name)
	}
	putRoute[S, T](d, name, r, false)
}

func addRoute[S, M any](d *Definition[S], kind routeKind, find Finder[M], h Handler[S, M]) {
	name := MessageName[M]()
	r := route[S]{
		kind:    kind,
		decode:  decoderOf[M](Upcaster{}),
		handler: func(ctx context.Context, c *Context[S], m any) error { return h(ctx, c, m.(M)) },
	}
	if find != nil {
		r.find = func(ctx context.Context, m any) (string, error) { return find(ctx, m.(M)) }
	}
	putRoute[S, M](d, name, r, true)
}

// putRoute registers r for M's name and its aliases (Aliased), each
// decoding its own shape; with check, a name registered already makes
// the definition invalid.
func putRoute[S, M any](d *Definition[S], name string, r route[S], check bool) {
	if _, dup := d.routes[name]; dup && check && d.err == nil {
		d.err = fmt.Errorf("%w: saga %s: message type %s registered twice", ErrInvalidDefinition, d.name, name)
	}
	d.routes[name] = r
	for _, a := range aliasesOf[M]() {
		if _, dup := d.routes[a.Name]; (dup && check || a.Name == "" || a.Name == name) && d.err == nil {
			d.err = fmt.Errorf("%w: saga %s: alias %q of message type %s is empty, its own name, or registered already", ErrInvalidDefinition, d.name, a.Name, name)
		}
		ar := r
		ar.decode = decoderOf[M](a.Upcast)
		d.routes[a.Name] = ar
	}
}

// Name returns the saga's name.
func (d *Definition[S]) Name() string { return d.name }

// Saga is a saga definition of any data type, as a Dispatcher takes it.
// Only *Definition implements it.
type Saga interface {
	Name() string
	runtime() sagaRuntime
}

func (d *Definition[S]) runtime() sagaRuntime { return d }

// sagaRuntime is the type-erased view of a Definition the dispatcher uses.
type sagaRuntime interface {
	Name() string
	validate() error
	messageTypes() []string
	policy() NotFoundPolicy
	timeoutEngine() string
	dataVersion() int
	lookup(msgType string) (routeKind, bool)
	catchUpOf(msgType string) catchUp
	decode(c Codec, msgType string, body []byte) (any, error)
	find(ctx context.Context, msgType string, m any) (string, error)
	// run runs the handler for m on the instance in rec (nil: new) and
	// returns the resulting record, not yet stored.
	run(ctx context.Context, s *stepState, msgType string, m any) error
}

func (d *Definition[S]) validate() error {
	if d.err != nil {
		return d.err
	}
	for _, r := range d.routes {
		if r.kind == routeStart {
			return nil
		}
	}
	return fmt.Errorf("%w: saga %s: no message starts it (use StartedBy)", ErrInvalidDefinition, d.name)
}

func (d *Definition[S]) messageTypes() []string {
	out := make([]string, 0, len(d.routes))
	for name := range d.routes {
		out = append(out, name)
	}
	return out
}

func (d *Definition[S]) policy() NotFoundPolicy { return d.notFound }

func (d *Definition[S]) timeoutEngine() string { return d.engine }

func (d *Definition[S]) lookup(msgType string) (routeKind, bool) {
	r, ok := d.routes[msgType]
	return r.kind, ok
}

func (d *Definition[S]) catchUpOf(msgType string) catchUp { return d.routes[msgType].catchUp }

func (d *Definition[S]) decode(c Codec, msgType string, body []byte) (any, error) {
	return d.routes[msgType].decode(c, body)
}

func (d *Definition[S]) find(ctx context.Context, msgType string, m any) (string, error) {
	id, err := d.routes[msgType].find(ctx, m)
	if err == nil && id == "" {
		err = Permanent(fmt.Errorf("%w: %s gives an empty ID for saga %s", ErrCorrelation, msgType, d.name))
	}
	return id, err
}

func (d *Definition[S]) run(ctx context.Context, s *stepState, msgType string, m any) error {
	c := &Context[S]{step: s}
	if err := s.keyInstance(d.partitionKey); err != nil {
		return err
	}
	var err error
	if c.Data, err = d.loadData(s.codec, s.rec); err != nil {
		return err
	}
	resetExpects(s.rec, d.liveness)
	r := d.routes[msgType]
	if s.late != nil && r.late != nil {
		err = r.late(ctx, c, m, *s.late)
	} else {
		err = r.handler(ctx, c, m)
	}
	if err != nil {
		return err
	}
	if err := d.setIndex(s.rec, c.Data); err != nil {
		return err
	}
	data, err := s.codec.Marshal(&c.Data)
	if err != nil {
		return fmt.Errorf("saga %s: encoding data: %w", d.name, err)
	}
	s.rec.SetData(data)
	s.rec.SetDataVersion(d.DataVersion())
	s.rec.Updated = s.now
	return nil
}
