package saga

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/jetsaga/jetsaga/transport"
)

// ErrTypeMismatch is returned by Decode for a message whose type name
// (TypeProperty) is not the one asked for.
var ErrTypeMismatch = errors.New("saga: message of another type")

// Decode decodes a message received from a transport queue — one a saga
// sent, say, read by plain Go code outside sagas — into its Go type M. It
// returns ErrTypeMismatch if the message travels under another name than
// MessageName[M] or one of its aliases (Aliased), and an error matching ErrMalformed if its JSON body does
// not decode. Messages encoded with another codec need a Decoder.
func Decode[M any](m *transport.Message) (M, error) {
	var v M
	if m == nil {
		return v, fmt.Errorf("%w: nil message", ErrMalformed)
	}
	want, got := MessageName[M](), m.Properties[TypeProperty]
	up, ok := Upcaster{}, got == want
	for _, a := range aliasesOf[M]() {
		if !ok && a.Name == got {
			up, ok = a.Upcast, true
		}
	}
	if !ok {
		return v, fmt.Errorf("%w: got %q, want %q", ErrTypeMismatch, got, want)
	}
	d, err := decoderOf[M](up)(JSON{}, m.Body)
	if err != nil {
		return v, fmt.Errorf("%w: %s: %w", ErrMalformed, got, err)
	}
	return d.(M), nil
}

// MessageType is a Go message type a Decoder decodes. TypeOf makes one.
type MessageType struct {
	name    string
	typ     reflect.Type
	decode  func(c Codec, body []byte) (any, error)
	aliases []Alias
}

// TypeOf returns the MessageType of messages of type M, which travel
// under MessageName[M], and are received under its aliases too
// (Aliased).
func TypeOf[M any]() MessageType {
	return MessageType{
		name:    MessageName[M](),
		typ:     reflect.TypeFor[M](),
		decode:  decoderOf[M](Upcaster{}),
		aliases: aliasesOf[M](),
	}
}

// Name returns the name messages of the type travel under.
func (t MessageType) Name() string { return t.name }

// Aliases returns the names messages of the type travelled under before
// (Aliased), which it is received under too.
func (t MessageType) Aliases() []string {
	out := make([]string, len(t.aliases))
	for i, a := range t.aliases {
		out[i] = a.Name
	}
	return out
}

// Decoder decodes received messages of a set of types into their Go
// values, by their type name (TypeProperty): the receiving side of the
// messages sagas send, for plain Go code outside sagas. It is safe for
// concurrent use.
type Decoder struct {
	codec Codec
	types map[string]MessageType
}

// NewDecoder returns a Decoder of messages of the given types, encoded
// with codec (nil: JSON). It returns an error matching ErrInvalidOption
// if two different Go types travel under the same name.
func NewDecoder(codec Codec, types ...MessageType) (*Decoder, error) {
	if codec == nil {
		codec = JSON{}
	}
	d := &Decoder{codec: codec, types: make(map[string]MessageType, len(types))}
	for _, t := range types {
		if t.decode == nil {
			return nil, fmt.Errorf("%w: zero MessageType (use TypeOf)", ErrInvalidOption)
		}
		if o, dup := d.types[t.name]; dup && o.typ != t.typ {
			return nil, fmt.Errorf("%w: %v and %v both travel as %q", ErrInvalidOption, o.typ, t.typ, t.name)
		}
		d.types[t.name] = t
		for _, a := range t.aliases {
			if o, dup := d.types[a.Name]; dup && o.typ != t.typ {
				return nil, fmt.Errorf("%w: %v and %v both travel as %q", ErrInvalidOption, o.typ, t.typ, a.Name)
			}
			at := t
			at.name, at.aliases = a.Name, nil
			at.decode = aliasDecoder(t, a)
			d.types[a.Name] = at
		}
	}
	return d, nil
}

// Decode returns the message's body decoded into the Go value of its
// type: an M of one of the types given to NewDecoder (not a pointer).
// It returns an error matching ErrUnknownMessage for a type not among
// them, and one matching ErrMalformed for a body that does not decode.
func (d *Decoder) Decode(m *transport.Message) (any, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: nil message", ErrMalformed)
	}
	name := m.Properties[TypeProperty]
	t, ok := d.types[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownMessage, name)
	}
	v, err := t.decode(d.codec, m.Body)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrMalformed, name, err)
	}
	return v, nil
}

// aliasDecoder decodes a body sent under alias a of t: upcast, then as t.
func aliasDecoder(t MessageType, a Alias) func(c Codec, body []byte) (any, error) {
	return func(c Codec, body []byte) (any, error) {
		b, err := a.Upcast.apply(c, body)
		if err != nil {
			return nil, fmt.Errorf("upcasting: %w", err)
		}
		return t.decode(c, b)
	}
}
