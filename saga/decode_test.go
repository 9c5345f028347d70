package saga_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

// message makes a received-like transport message of v, as a saga sends
// it.
func message(t *testing.T, v any) *transport.Message {
	t.Helper()
	body, err := saga.JSON{}.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("%T", v)
	if n, ok := v.(saga.Named); ok {
		name = n.MessageName()
	}
	return &transport.Message{Body: body, Properties: map[string]string{saga.TypeProperty: name}}
}

type renamed struct{ N int }

func (renamed) MessageName() string { return "billing.Renamed" }

func TestDecode(t *testing.T) {
	v, err := saga.Decode[Verified](message(t, Verified{Login: "l1"}))
	if err != nil || v != (Verified{Login: "l1"}) {
		t.Errorf("Decode[Verified]: got %+v, %v", v, err)
	}
	r, err := saga.Decode[renamed](message(t, renamed{N: 7}))
	if err != nil || r.N != 7 {
		t.Errorf("Decode[renamed] (Named): got %+v, %v", r, err)
	}
	if _, err := saga.Decode[Expired](message(t, Verified{Login: "l1"})); !errors.Is(err, saga.ErrTypeMismatch) {
		t.Errorf("Decode[Expired] of a Verified: got %v, want ErrTypeMismatch", err)
	}
	bad := message(t, Verified{})
	bad.Body = []byte("{")
	if _, err := saga.Decode[Verified](bad); !errors.Is(err, saga.ErrMalformed) {
		t.Errorf("Decode of a bad body: got %v, want ErrMalformed", err)
	}
	if _, err := saga.Decode[Verified](nil); !errors.Is(err, saga.ErrMalformed) {
		t.Errorf("Decode(nil): got %v, want ErrMalformed", err)
	}
}

func TestDecoder(t *testing.T) {
	dec, err := saga.NewDecoder(nil, saga.TypeOf[Verified](), saga.TypeOf[Expired](), saga.TypeOf[renamed]())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []any{Verified{Login: "l1"}, Expired{Login: "l2"}, renamed{N: 3}} {
		got, err := dec.Decode(message(t, want))
		if err != nil || got != want {
			t.Errorf("Decode: got %#v, %v; want %#v", got, err, want)
		}
	}
	if _, err := dec.Decode(message(t, SendCode{})); !errors.Is(err, saga.ErrUnknownMessage) {
		t.Errorf("Decode of an unregistered type: got %v, want ErrUnknownMessage", err)
	}
	bad := message(t, Verified{})
	bad.Body = []byte("[")
	if _, err := dec.Decode(bad); !errors.Is(err, saga.ErrMalformed) {
		t.Errorf("Decode of a bad body: got %v, want ErrMalformed", err)
	}
	if _, err := saga.NewDecoder(nil, saga.TypeOf[renamed](), saga.TypeOf[otherNamed]()); !errors.Is(err, saga.ErrInvalidOption) {
		t.Errorf("NewDecoder of two types under one name: got %v, want ErrInvalidOption", err)
	}
	if _, err := saga.NewDecoder(nil, saga.MessageType{}); !errors.Is(err, saga.ErrInvalidOption) {
		t.Errorf("NewDecoder of a zero MessageType: got %v, want ErrInvalidOption", err)
	}
	if got := saga.TypeOf[renamed]().Name(); got != "billing.Renamed" {
		t.Errorf("Name: got %q", got)
	}
}

type otherNamed struct{}

func (otherNamed) MessageName() string { return "billing.Renamed" }

// A service reading the events a saga sends, outside sagas: one Decoder
// for the types it expects, and a type switch.
func ExampleDecoder() {
	ctx := context.Background()
	broker, _ := transport.NewMemory()
	defer broker.Close()
	d, _ := saga.NewDispatcher(broker, memstore.New(), "auth", saga.WithSagas(TwoFactor))
	// Stand-ins for what the saga sends.
	d.SendTo(ctx, "auth-events", Verified{Login: "l1"})
	d.SendTo(ctx, "auth-events", Expired{Login: "l2"})

	dec, err := saga.NewDecoder(saga.JSON{}, saga.TypeOf[Verified](), saga.TypeOf[Expired]())
	if err != nil {
		fmt.Println(err)
		return
	}
	events, _ := broker.Queue(ctx, "auth-events")
	ds, _ := events.Receive(ctx, 2)
	for _, del := range ds {
		v, err := dec.Decode(del.Message)
		switch v := v.(type) {
		case Verified:
			fmt.Println(v.Login, "may log in")
		case Expired:
			fmt.Println(v.Login, "took too long")
		default:
			fmt.Println(err)
		}
		del.Complete(ctx)
	}
	// Output:
	// l1 may log in
	// l2 took too long
}
