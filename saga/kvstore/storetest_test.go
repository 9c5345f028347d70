package kvstore_test

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/saga/storetest"
)

// TestConformance runs the Store conformance suite on a bucket of its own
// per subtest, on one embedded nats-server.
func TestConformance(t *testing.T) {
	js := connectJS(t)
	var n atomic.Int32
	storetest.Run(t, func(t *testing.T) saga.Store {
		s, err := kvstore.New(t.Context(), js, kvstore.Config{Bucket: "conformance_" + strconv.Itoa(int(n.Add(1)))})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, storetest.Features{})
}
