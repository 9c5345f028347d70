package embedded

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestStartClusterPortTaken: another process takes a port StartCluster
// picked before the node meant for it binds it (here: the first pick's
// route port of node 1, held by the test for the whole start). The
// cluster starts anyway, on fresh ports, well within ReadyTimeout.
func TestStartClusterPortTaken(t *testing.T) {
	var held []net.Listener
	var mu sync.Mutex
	portsPicked = func(ports []int) {
		mu.Lock()
		defer mu.Unlock()
		if len(held) > 0 {
			return // only the first pick
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(ports[3+1]))
		if err != nil {
			t.Errorf("take port %d: %v", ports[3+1], err)
			return
		}
		held = append(held, l)
	}
	t.Cleanup(func() {
		portsPicked = nil
		for _, l := range held {
			l.Close()
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	began := time.Now()
	c, err := StartCluster(ctx, ClusterOptions{ReadyTimeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("StartCluster with a picked port taken: %v after %v", err, time.Since(began).Round(time.Millisecond))
	}
	defer c.Close()
	took := time.Since(began)
	if len(held) != 1 {
		t.Fatalf("the test took %d ports, want 1", len(held))
	}
	if took > 15*time.Second {
		t.Errorf("StartCluster took %v with a port taken: it waited for the node rather than picking fresh ports", took.Round(time.Millisecond))
	}
	t.Logf("cluster started in %v although port %s was taken", took.Round(time.Millisecond), held[0].Addr())
}

// TestRestartPortTaken: while a node is down another process holds its
// client port for a second; Restart, which must use the same port, waits
// for it and succeeds, and clients reach the node at its old URL.
func TestRestartPortTaken(t *testing.T) {
	p, err := StartProcess(Options{ReadyTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	url := p.ClientURL()
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	addr := url[len("nats://"):]
	var l net.Listener
	for deadline := time.Now().Add(10 * time.Second); ; {
		// the killed process's socket may take a moment to go
		if l, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("take port %s: %v", addr, err)
	}
	released := make(chan time.Time, 1)
	time.AfterFunc(time.Second, func() { // the other process lets go after a second
		l.Close()
		released <- time.Now()
	})
	if err := p.Restart(); err != nil {
		t.Fatalf("Restart with its port taken for a second: %v", err)
	}
	restarted := time.Now()
	if got := p.ClientURL(); got != url {
		t.Errorf("ClientURL after Restart %s, want %s", got, url)
	}
	if r := <-released; restarted.Before(r) {
		t.Errorf("Restart returned at %v, before the port was released at %v", restarted, r)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect to the restarted node: %v", err)
	}
	nc.Close()
}

// TestStartPortTaken: Start on a port something holds fails at once
// with ErrAddrInUse, instead of waiting out ReadyTimeout.
func TestStartPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	began := time.Now()
	s, err := Start(Options{Port: l.Addr().(*net.TCPAddr).Port, ReadyTimeout: 20 * time.Second})
	if err == nil {
		s.Shutdown()
		t.Fatal("Start on a taken port: nil error")
	}
	if !errors.Is(err, ErrAddrInUse) {
		t.Errorf("Start on a taken port: %v, want ErrAddrInUse", err)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("Start on a taken port failed after %v, want at once", took.Round(time.Millisecond))
	}
}
