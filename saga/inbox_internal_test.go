package saga

import (
	"fmt"
	"slices"
	"testing"
	"time"

	recordfmt "github.com/jetsaga/jetsaga/internal/record"
	"github.com/jetsaga/jetsaga/transport"
)

// TestDoneListFits: the instances a retry names fit in one property; past
// 4096 bytes the rest are left out (they rely on their inboxes).
func TestDoneListFits(t *testing.T) {
	var done []string
	for i := range 1000 {
		done = append(done, recordfmt.InboxDigest(fmt.Sprint("k", i)))
	}
	m := &transport.Message{Properties: map[string]string{}}
	setDone(m, done[:3])
	if got := doneList(m.Properties[propDone]); !slices.Equal(got, done[:3]) {
		t.Fatalf("round trip: %q, want %q", got, done[:3])
	}
	setDone(m, done)
	v := m.Properties[propDone]
	got := doneList(v)
	if len(v) > maxPropValue || len(got) < 300 || !slices.Equal(got, done[:len(got)]) {
		t.Fatalf("%d bytes, %d instances: want at most %d bytes of the first ones", len(v), len(got), maxPropValue)
	}
}

func TestInboxRetentionDefaults(t *testing.T) {
	for _, c := range []struct {
		qc   transport.QueueConfig
		want time.Duration
	}{
		{transport.QueueConfig{}, 10*36*time.Second + InboxMargin},                                                         // 30 s + 5 s grace
		{transport.QueueConfig{LockDuration: 5 * time.Second, MaxDeliveryCount: 10}, 10*8*time.Second + InboxMargin},       // 6.25 s: 7 s
		{transport.QueueConfig{LockDuration: 1500 * time.Millisecond, MaxDeliveryCount: 3}, 3*3*time.Second + InboxMargin}, // 2 s
		{transport.QueueConfig{LockDuration: time.Minute, MaxDeliveryCount: 1}, 66*time.Second + InboxMargin},              // 5 s grace at most
	} {
		if got := InboxRetention(c.qc); got != c.want {
			t.Errorf("InboxRetention(%+v) = %v, want %v", c.qc, got, c.want)
		}
	}
}
