package cli

import (
	"bufio"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// TestHousekeepCommand: a message exhausts its deliveries with only a
// receiver that is not jetsaga's and no jetsaga service running;
// `jetsaga housekeep` moves it to the dead-letter queue with its reason.
func TestHousekeepCommand(t *testing.T) {
	srv := testutil.StartServer(t, embedded.Options{})
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b, err := transport.NewJetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	q, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: "payments", MaxDeliveryCount: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Send(t.Context(), &transport.Message{Body: []byte("poison")}); err != nil {
		t.Fatal(err)
	}
	b.Close() // no jetsaga service has the queue open from here on

	js, _ := jetstream.New(nc)
	c, err := js.Consumer(t.Context(), "JETSAGA_Q_payments_0", transport.ReceiveConsumer)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := c.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := msg.Nak(); err != nil {
		t.Fatal(err)
	}
	// The receiver asks for more: the server finds the message exhausted
	// and delivers nothing.
	if msg, err := c.Next(jetstream.FetchMaxWait(time.Second)); err == nil {
		t.Fatalf("delivered past MaxDeliveryCount: %v", msg.Headers())
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"--server", srv.ClientURL(), "housekeep"}, strings.NewReader(""), pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil || line != "looking after queue payments\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	go io.Copy(io.Discard, pr)
	testutil.Await(t, 30*time.Second, func() string {
		dl, err := js.Stream(t.Context(), "JETSAGA_D_payments")
		if err != nil {
			return err.Error()
		}
		m, err := dl.GetMsg(t.Context(), 1)
		if err != nil {
			return "dead-letter queue: " + err.Error()
		}
		if got := m.Header.Get(transport.HeaderDeadLetterReason); got != transport.ReasonMaxDeliveryCountExceeded {
			t.Fatalf("dead letter's reason %q", got)
		}
		return ""
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("housekeep exit %d", code)
	}
}

// TestHousekeepWaitsForTheServer: `jetsaga housekeep` waits while the
// server is away (its listing fails) instead of exiting, and looks after
// a queue created once the server is back.
func TestHousekeepWaitsForTheServer(t *testing.T) {
	relist := housekeepRelist
	t.Cleanup(func() { housekeepRelist = relist }) // after the command returned (below)
	housekeepRelist = 100 * time.Millisecond
	store := t.TempDir()
	srv := testutil.StartServer(t, embedded.Options{StoreDir: store})
	url := srv.ClientURL()
	_, portText, _ := net.SplitHostPort(strings.TrimPrefix(url, "nats://"))
	port, _ := strconv.Atoi(portText)

	first, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	fb, err := transport.NewJetStream(first)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fb.OpenQueue(t.Context(), transport.QueueConfig{Name: "first"}); err != nil {
		t.Fatal(err)
	}
	fb.Close()
	first.Close()

	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr testutil.Buffer
	done := make(chan int, 1)
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		done <- Run(ctx, []string{"--server", url, "--timeout", "500ms", "housekeep"}, strings.NewReader(""), &stdout, &stderr)
	}()
	t.Cleanup(func() { cancel(); <-returned })
	testutil.Await(t, 30*time.Second, func() string {
		if !strings.Contains(stdout.String(), "looking after queue first\n") {
			return "housekeep has not started"
		}
		return ""
	})
	srv.Shutdown()
	testutil.Await(t, 30*time.Second, func() string {
		select {
		case code := <-done:
			t.Fatalf("housekeep exited (%d) while the server was away; stderr:\n%s", code, stderr.String())
		default:
		}
		if !strings.Contains(stderr.String(), "listing queues:") {
			return "housekeep has not seen the server go"
		}
		return ""
	})
	back := testutil.StartServer(t, embedded.Options{StoreDir: store, Port: port})
	nc, err := back.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, err := transport.NewJetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: "later"}); err != nil {
		t.Fatal(err)
	}
	testutil.Await(t, 60*time.Second, func() string {
		select {
		case code := <-done:
			t.Fatalf("housekeep exited (%d); stderr:\n%s", code, stderr.String())
		default:
		}
		if !strings.Contains(stdout.String(), "looking after queue later\n") {
			return "housekeep does not look after the queue created after the outage; stdout:\n" + stdout.String()
		}
		return ""
	})
	if !strings.Contains(stderr.String(), "listing queues works again") {
		t.Errorf("housekeep did not say that listing works again; stderr:\n%s", stderr.String())
	}
	if n := strings.Count(stderr.String(), "listing queues:"); n != 1 {
		t.Errorf("the outage logged %d lines, want 1; stderr:\n%s", n, stderr.String())
	}
}
