package transporttest_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/transporttest"
)

func TestMemory(t *testing.T) {
	t.Parallel()
	transporttest.Run(t, newMemory, memoryFeatures)
}

// TestMemoryKeyed runs the suite with fairness keys on.
func TestMemoryKeyed(t *testing.T) {
	t.Parallel()
	transporttest.RunKeyed(t, newMemory, memoryFeatures)
}

var memoryFeatures = transporttest.Features{ActivationSlack: 100 * time.Millisecond, DedupForgetsOnTime: true}

func newMemory(t *testing.T) *transport.Broker {
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatalf("NewMemory: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil && !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}
