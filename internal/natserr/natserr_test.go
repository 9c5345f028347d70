package natserr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("boom"), false},
		{nats.ErrTimeout, true},
		{fmt.Errorf("load: %w", context.DeadlineExceeded), true},
		{context.Canceled, false},
		{nats.ErrNoResponders, true},
		{jetstream.ErrNoStreamResponse, true},
		{nats.ErrDisconnected, true},
		{nats.ErrConnectionReconnecting, true},
		{nats.ErrConnectionClosed, false}, // for good: waiting cannot help
		{fmt.Errorf("x: %w (%w)", nats.ErrConnectionClosed, nats.ErrTimeout), false},
		{&jetstream.APIError{ErrorCode: 10008, Code: 503}, true},  // JetStream system temporarily unavailable
		{&jetstream.APIError{ErrorCode: 10118, Code: 500}, true},  // stream offline
		{&jetstream.APIError{ErrorCode: 10071, Code: 400}, false}, // wrong last sequence: a conflict
		{&jetstream.APIError{ErrorCode: 10059, Code: 404}, false}, // stream not found
		{jetstream.ErrKeyExists, false},
	} {
		if got := Unavailable(tc.err); got != tc.want {
			t.Errorf("Unavailable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
