package saga

import (
	"encoding/json"
	"reflect"
)

// Codec encodes message bodies and saga data. The default is JSON.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
	// ContentType names the encoding, e.g. "application/json".
	ContentType() string
}

// JSON is the default Codec.
type JSON struct{}

func (JSON) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (JSON) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
func (JSON) ContentType() string                { return "application/json" }

// Named lets a message type choose the name it travels under. Without it
// the name is the Go type's package-qualified name (e.g.
// "twofactor.CodeRequested"), which changes if the type is renamed or
// moved; implement Named on messages that outlive a refactoring:
//
//	func (CodeRequested) MessageName() string { return "twofactor.CodeRequested" }
//
// Timeout payloads travel under their name too, and need it most: a
// timeout requested today is handled weeks later, perhaps by a binary in
// which the payload's type has been renamed or moved. One whose name no
// OnTimeout knows any more is dead-lettered as an unknown type.
type Named interface {
	MessageName() string
}

// MessageName returns the name messages of type M travel under.
func MessageName[M any]() string {
	var zero M
	if n, ok := any(zero).(Named); ok {
		return n.MessageName()
	}
	if n, ok := any(&zero).(Named); ok {
		return n.MessageName()
	}
	return reflect.TypeFor[M]().String()
}

func nameOf(v any) string {
	if n, ok := v.(Named); ok {
		return n.MessageName()
	}
	t := reflect.TypeOf(v)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.String()
}
