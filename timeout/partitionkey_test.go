package timeout_test

import (
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// A timeout's PartitionKey reaches its delivered message, unless the
// message chose its partition itself (a key or a session of its own).
func TestDeliveryMessagePartitionKey(t *testing.T) {
	at := time.Unix(100, 0)
	for _, tc := range []struct {
		name string
		msg  transport.Message
		want string
	}{
		{"no key of its own", transport.Message{}, "tenant-a"},
		{"a key of its own", transport.Message{PartitionKey: "own"}, "own"},
		{"a session", transport.Message{SessionID: "s"}, ""},
	} {
		to := timeout.Timeout{ID: "t", Queue: "q", At: at, Message: &tc.msg, PartitionKey: "tenant-a"}
		if got := to.DeliveryMessage().PartitionKey; got != tc.want {
			t.Errorf("%s: delivered with PartitionKey %q, want %q", tc.name, got, tc.want)
		}
	}
}
