package sagatest

import (
	"reflect"
	"unsafe"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

// userHooks returns the hooks that opts set with saga.WithHooks, so that
// the Env can call them before its own. saga.WithHooks replaces the hooks
// set before it and saga has no way to read them back, so userHooks
// builds a dispatcher with opts (which opens nothing) and reads its
// configuration. found is false if that configuration no longer has the
// shape it expects.
//
// TODO: drop this once saga lets hooks be composed (WithHooks adding to
// the hooks set before it) or read back.
func userHooks(b *transport.Broker, opts []saga.Option) (h saga.Hooks, found bool) {
	d, err := saga.NewDispatcher(b, memstore.New(), "sagatest-hooks", opts...)
	if err != nil {
		return h, true // NewDispatcher reports it again, with the Env's queue
	}
	v := reflect.ValueOf(d).Elem().FieldByName("cfg")
	if !v.IsValid() || v.Kind() != reflect.Struct {
		return h, false
	}
	f := v.FieldByName("hooks")
	if !f.IsValid() || f.Type() != reflect.TypeFor[saga.Hooks]() {
		return h, false
	}
	return *(*saga.Hooks)(unsafe.Pointer(f.UnsafeAddr())), true
}
