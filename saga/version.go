package saga

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Versions of saga data, and the names and shapes messages had before.
// See "Changing a saga" in the package documentation.

// ErrDataVersionAhead says that a saga instance's record was written by
// a newer version of the saga's data than the definition knows (see
// DataVersion). A dispatcher never writes such a record: it leaves the
// message for a newer worker (outcome VersionWait).
var ErrDataVersionAhead = errors.New("saga: record written by a newer data version")

// Upcaster turns data, or a message body, of an older shape into the next
// shape. Make one with Upcast or UpcastBytes. The zero Upcaster changes
// nothing: the newer type reads the older shape as it is (a field added,
// say).
type Upcaster struct {
	f func(c Codec, b []byte) ([]byte, error)
}

// Upcast returns the Upcaster that decodes the older shape into Old,
// turns it into New with f, and encodes the result. Old is usually the
// type as it was, kept (unexported) beside the new one.
func Upcast[Old, New any](f func(Old) (New, error)) Upcaster {
	return Upcaster{f: func(c Codec, b []byte) ([]byte, error) {
		var old Old
		if len(b) > 0 {
			if err := c.Unmarshal(b, &old); err != nil {
				return nil, err
			}
		}
		n, err := f(old)
		if err != nil {
			return nil, err
		}
		return c.Marshal(&n)
	}}
}

// UpcastBytes returns the Upcaster that turns encoded data (JSON, unless
// the dispatcher has another codec: WithCodec) with f.
func UpcastBytes(f func(data []byte) ([]byte, error)) Upcaster {
	return Upcaster{f: func(_ Codec, b []byte) ([]byte, error) { return f(b) }}
}

func (u Upcaster) apply(c Codec, b []byte) ([]byte, error) {
	if u.f == nil {
		return b, nil
	}
	return u.f(c, b)
}

// DataVersion declares that the saga's data type is at version n (1 or
// more; a saga without the option is at version 1), and how the data of
// each older version becomes the next: upcasters[i] turns version i+1
// into version i+2 (at most n-1 of them; one not given, or the zero
// Upcaster, leaves the data as it is).
//
// Every record the saga writes carries its version (version 1 as
// records written before versions existed: without one). On load, older
// data is upcast version by version, so a handler sees only the current
// type. A dispatcher whose definition is older than a record — a worker
// not yet upgraded, in a rolling deploy — never writes it: it leaves the
// message for a newer worker, scheduling it again on its queue after
// WithVersionWait (outcome VersionWait).
func DataVersion(n int, upcasters ...Upcaster) DefinitionOption {
	return func(c *definitionConfig) {
		switch {
		case n < 1:
			c.err = fmt.Errorf("%w: DataVersion(%d): versions start at 1", ErrInvalidOption, n)
		case len(upcasters) > n-1:
			c.err = fmt.Errorf("%w: DataVersion(%d): %d upcasters, at most %d (version i to i+1)", ErrInvalidOption, n, len(upcasters), n-1)
		default:
			c.version, c.upcasters = n, upcasters
		}
	}
}

// DataVersion returns the version of the saga's data (see DataVersion).
func (d *Definition[S]) DataVersion() int { return max(d.version, 1) }

func (d *Definition[S]) dataVersion() int { return d.DataVersion() }

// loadData returns the data in rec, upcast to the definition's version.
// It returns ErrDataVersionAhead for a record of a newer version.
func (d *Definition[S]) loadData(c Codec, rec *record) (S, error) {
	var s S
	data, v := rec.Data(), rec.DataVersion()
	if v > d.DataVersion() {
		return s, fmt.Errorf("%w: saga %s: version %d, this definition knows %d", ErrDataVersionAhead, d.name, v, d.DataVersion())
	}
	for ; v < d.DataVersion(); v++ {
		var u Upcaster
		if v-1 < len(d.upcasters) {
			u = d.upcasters[v-1]
		}
		b, err := u.apply(c, data)
		if err != nil {
			return s, fmt.Errorf("saga %s: upcasting data from version %d to %d: %w", d.name, v, v+1, err)
		}
		data = b
	}
	if len(data) > 0 {
		if err := c.Unmarshal(data, &s); err != nil {
			return s, fmt.Errorf("saga %s: decoding stored data (version %d): %w", d.name, d.DataVersion(), err)
		}
	}
	return s, nil
}

// InstanceOf returns the data of an instance of saga s, decoded and
// upcast to s's version, with what Dispatcher.Instance returns. It
// returns ErrNotFound for a missing instance (the data of a completed
// one is the zero S), and an error matching ErrDataVersionAhead for a
// record newer than s.
func InstanceOf[S any](ctx context.Context, d *Dispatcher, s *Definition[S], id string) (S, *Instance, error) {
	var zero S
	inst, rec, err := d.instance(ctx, s.Name(), id)
	if err != nil {
		return zero, nil, err
	}
	data, err := s.loadData(d.cfg.codec, rec)
	if err != nil {
		return zero, inst, err
	}
	return data, inst, nil
}

// DefaultVersionWait is how long a dispatcher leaves a message for a
// newer worker, unless WithVersionWait says otherwise.
const DefaultVersionWait = 10 * time.Second

// WithVersionWait sets how long a message whose instance's record is
// newer than the saga's definition (see DataVersion) waits on the queue
// before a worker takes it again: a newer worker, or this one, which
// leaves it again. Default: DefaultVersionWait.
func WithVersionWait(delay time.Duration) Option {
	return optionFunc(func(c *config) error {
		if delay <= 0 {
			return fmt.Errorf("%w: WithVersionWait(%v): must be positive", ErrInvalidOption, delay)
		}
		c.versionWait = delay
		return nil
	})
}

// Aliased lets a message type be received under the names it travelled
// under before: a type renamed (or given a new name with Named, because
// its shape changed) keeps receiving the messages and timeouts sent, or
// requested, under its old names — a timeout requested before a deploy
// fires weeks after it. Sagas (StartedBy, Handles, OnTimeout), Decode and
// Decoder accept each alias as the type's name; the messages the type
// sends travel under its current name (MessageName).
//
//	func (Reminder) MessageName() string { return "billing.Reminder.v2" }
//
//	func (Reminder) MessageAliases() []saga.Alias {
//		return []saga.Alias{
//			{Name: "billing.Reminder", Upcast: saga.Upcast(func(old reminderV1) (Reminder, error) {
//				return Reminder{Invoice: old.Invoice, N: old.Count}, nil
//			})},
//		}
//	}
type Aliased interface {
	MessageAliases() []Alias
}

// Alias is a name a message type travelled under before, and how a body
// sent under it becomes the type's current shape.
type Alias struct {
	Name string
	// Upcast turns a body sent under Name into the type's current shape.
	// Zero: the type decodes it as it is.
	Upcast Upcaster
}

// aliasesOf returns the aliases of message type M.
func aliasesOf[M any]() []Alias {
	var zero M
	if a, ok := any(zero).(Aliased); ok {
		return a.MessageAliases()
	}
	if a, ok := any(&zero).(Aliased); ok {
		return a.MessageAliases()
	}
	return nil
}

// decoderOf returns the function that decodes a body sent under a name
// of M whose upcaster is up.
func decoderOf[M any](up Upcaster) func(c Codec, body []byte) (any, error) {
	return func(c Codec, body []byte) (any, error) {
		b, err := up.apply(c, body)
		if err != nil {
			return nil, fmt.Errorf("upcasting: %w", err)
		}
		var m M
		if err := c.Unmarshal(b, &m); err != nil {
			return nil, err
		}
		return m, nil
	}
}
