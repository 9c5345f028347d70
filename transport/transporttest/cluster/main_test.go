package cluster_test

import (
	"os"
	"testing"

	"github.com/jetsaga/jetsaga/transport/embedded"
)

func TestMain(m *testing.M) {
	embedded.RunChildIfRequested() // the nodes' nats-server children
	os.Exit(m.Run())
}
