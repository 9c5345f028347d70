package schedule_test

import (
	"log/slog"
	"testing"

	"github.com/jetsaga/jetsaga/transport"
)

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// brokers opens a broker of each kind for a test that runs on both: the
// memory broker, and one on an embedded nats-server.
var brokers = map[string]func(t *testing.T) *transport.Broker{
	"memory": func(t *testing.T) *transport.Broker {
		b, err := transport.NewMemory()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	},
	"nats-server": func(t *testing.T) *transport.Broker {
		_, b := jetStream(t)
		return b
	},
}
