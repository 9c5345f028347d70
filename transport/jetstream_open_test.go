package transport_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// TestOpenAsksAgainWhenUnanswered: a step of an open or attach whose
// requests go unanswered within the API timeout (on a cluster under load,
// the meta leader's answer waits for a new group's election, and of
// concurrent requests for one stream or consumer only the last is
// answered) is asked again until the caller's context ends, and the open
// ends with its definite answer. Here the link holds the client's bytes
// for several API timeouts at the start of each open: the first attempts
// reach the server late (and take effect), their answers are lost, and a
// later attempt finds what they made. With a deadline that ends during
// the stall, the open ends with the caller's deadline.
func TestOpenAsksAgainWhenUnanswered(t *testing.T) {
	srv, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	link := stallProxy(t, srv.ClientURL())
	nc, err := nats.Connect(link.url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	const timeout = 250 * time.Millisecond
	const stall = 4 * timeout
	b, err := transport.NewJetStream(nc, transport.WithAPITimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })

	stalled := func(what string, open func(context.Context) error) {
		t.Helper()
		link.stall(stall)
		start := time.Now()
		if err := open(t.Context()); err != nil {
			t.Fatalf("%s with its first requests unanswered for %v (API timeout %v): %v", what, stall, timeout, err)
		}
		if took := time.Since(start); took < stall {
			t.Fatalf("%s took %v, less than the stall (%v): the stall did not hold its requests", what, took, stall)
		}
	}
	var (
		tp  *transport.Topic
		sub *transport.Subscription
	)
	stalled("OpenQueue", func(ctx context.Context) (err error) {
		_, err = b.OpenQueue(ctx, transport.QueueConfig{Name: "q", Partitions: 2})
		return err
	})
	// Attaching, from a broker that has not opened them (a broker keeps
	// what it opened).
	other, err := transport.NewJetStream(nc, transport.WithAPITimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	stalled("Queue", func(ctx context.Context) (err error) {
		_, err = other.Queue(ctx, "q")
		return err
	})
	stalled("OpenTopic", func(ctx context.Context) (err error) {
		tp, err = b.OpenTopic(ctx, transport.TopicConfig{Name: "t", Partitions: 2})
		return err
	})
	stalled("OpenSubscription", func(ctx context.Context) (err error) {
		sub, err = tp.OpenSubscription(ctx, "s", transport.SubscriptionConfig{})
		return err
	})
	stalled("Topic and Subscription", func(ctx context.Context) error {
		otp, err := other.Topic(ctx, "t")
		if err != nil {
			return err
		}
		_, err = otp.Subscription(ctx, "s")
		return err
	})
	stalled("Broker.OpenSubscription with another filter", func(ctx context.Context) error {
		_, err := b.OpenSubscription(ctx, "t", "s", transport.SubscriptionConfig{Filter: transport.Filter{Subjects: []string{"other"}}})
		if !errors.Is(err, transport.ErrInvalidConfig) {
			return err
		}
		return nil
	})
	if _, err := tp.Send(t.Context(), &transport.Message{Body: []byte("x")}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if ds, err := sub.Receive(t.Context(), 1); err != nil || len(ds) != 1 {
		t.Fatalf("Receive from the subscription opened during the stall: %d, %v", len(ds), err)
	}

	link.stall(stall)
	ctx, cancel := context.WithTimeout(t.Context(), stall/2)
	defer cancel()
	if _, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "q2"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("OpenQueue with a deadline within the stall: %v, want %v", err, context.DeadlineExceeded)
	}
}

// stallLink is a TCP proxy on loopback whose client-to-server bytes can be
// held for a while (stall), as a busy cluster holds the answers.
type stallLink struct {
	url  string
	mu   sync.Mutex
	gate chan struct{} // closed while bytes pass
}

func stallProxy(t *testing.T, serverURL string) *stallLink {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallLink{url: "nats://" + l.Addr().String(), gate: make(chan struct{})}
	close(p.gate)
	var wg sync.WaitGroup
	var conns []net.Conn
	var mu sync.Mutex
	wg.Go(func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", u.Host)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			wg.Go(func() {
				io.Copy(in, out)
				in.Close()
			})
			wg.Go(func() {
				p.copy(out, in)
				out.Close()
			})
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return p
}

// stall holds the client's bytes for d from now.
func (p *stallLink) stall(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	gate := make(chan struct{})
	p.gate = gate
	time.AfterFunc(d, func() { close(gate) })
}

// copy passes src's bytes to dst, each chunk once the gate is open.
func (p *stallLink) copy(dst io.Writer, src io.Reader) {
	b := make([]byte, 32<<10)
	for {
		n, err := src.Read(b)
		if n > 0 {
			p.mu.Lock()
			gate := p.gate
			p.mu.Unlock()
			<-gate
			if _, err := dst.Write(b[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
