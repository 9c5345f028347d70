package transporttest_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/transporttest"
)

func TestMemory(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) *transport.Broker {
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
	}, transporttest.Features{ActivationSlack: 100 * time.Millisecond, DedupForgetsOnTime: true})
}
