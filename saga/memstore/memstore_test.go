package memstore_test

import (
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/saga/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) saga.Store { return memstore.New() },
		storetest.Features{TTL: 100 * time.Millisecond, ExpiryLag: time.Second})
}
