package transporttest_test

import (
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
	"github.com/jetsaga/jetsaga/transport/transporttest"
)

func TestMain(m *testing.M) {
	embedded.RunChildIfRequested() // the nats-server child of TestJetStream
	os.Exit(m.Run())
}

// TestJetStream runs the conformance suite on a real nats-server. The
// server runs in a child process so that the restart tests can SIGKILL it.
//
// The package's top-level tests run side by side (t.Parallel), each on
// servers of its own, so that one's restarts and kills stay its own;
// go test's -parallel bounds how many of their cases run at once.
func TestJetStream(t *testing.T) { runJetStream(t, transporttest.Run) }

// TestJetStreamKeyed runs the suite with fairness keys on.
func TestJetStreamKeyed(t *testing.T) { runJetStream(t, transporttest.RunKeyed) }

func runJetStream(t *testing.T, run func(*testing.T, func(*testing.T) *transport.Broker, transporttest.Features)) {
	t.Parallel()
	srv, err := embedded.StartProcess(embedded.Options{})
	if err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(func() { srv.Close() })

	connect := func(t *testing.T, url string, opts ...transport.Option) *transport.Broker {
		nc, err := nats.Connect(url,
			nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond), nats.RetryOnFailedConnect(true))
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		b, err := transport.NewJetStream(nc, opts...)
		if err != nil {
			t.Fatalf("NewJetStream: %v", err)
		}
		t.Cleanup(func() {
			b.Close()
			nc.Close()
		})
		return b
	}
	newBroker := func(t *testing.T) *transport.Broker { return connect(t, srv.ClientURL()) }
	run(t, newBroker, transporttest.Features{
		ActivationSlack: time.Second,
		CancelMargin:    500 * time.Millisecond,
		SlowLink: func(t *testing.T, delay time.Duration) *transport.Broker {
			// Attaching takes a few requests in one API call.
			return connect(t, transporttest.DelayProxy(t, srv.ClientURL(), delay), transport.WithAPITimeout(30*time.Second))
		},
		Restart: func(t *testing.T, abrupt bool, downtime time.Duration) {
			stop := srv.Stop
			if abrupt {
				stop = srv.Kill
			}
			if err := stop(); err != nil && !abrupt {
				t.Fatalf("stop nats-server: %v", err)
			}
			time.Sleep(downtime) // the outage itself, not a wait for a condition
			if err := srv.Restart(); err != nil {
				t.Fatalf("restart nats-server: %v", err)
			}
		},
	})
}
