package testutil

import (
	"net"
	"sync"
	"testing"
)

// Blackhole is a TCP relay on loopback in front of a server, for tests
// of a network that stops carrying packets without closing anything: while
// it is on, connections are accepted and kept open, but no byte moves
// either way and no new connection reaches the server — what a firewall
// that drops packets, or a peer that vanished without a FIN, looks like to
// a client (it waits for its own timeouts). Turned off, the bytes held back
// flow on, as TCP's retransmissions would deliver them.
type Blackhole struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	on    bool
	moved *sync.Cond // broadcast when on turns off
	conns map[net.Conn]struct{}
	done  bool
}

// NewBlackhole starts a relay to target (host:port) that t closes.
func NewBlackhole(t testing.TB, target string) *Blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &Blackhole{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	b.moved = sync.NewCond(&b.mu)
	go b.accept()
	t.Cleanup(b.close)
	return b
}

// Addr is the address clients dial instead of the target's.
func (b *Blackhole) Addr() string { return b.ln.Addr().String() }

// Set turns the black hole on (nothing moves) or off (everything moves,
// what was held back first).
func (b *Blackhole) Set(on bool) {
	b.mu.Lock()
	b.on = on
	b.mu.Unlock()
	b.moved.Broadcast()
}

// pass waits while the black hole is on; false once it is closed.
func (b *Blackhole) pass() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.on && !b.done {
		b.moved.Wait()
	}
	return !b.done
}

func (b *Blackhole) track(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		c.Close()
		return false
	}
	b.conns[c] = struct{}{}
	return true
}

func (b *Blackhole) accept() {
	for {
		in, err := b.ln.Accept()
		if err != nil {
			return
		}
		if !b.track(in) {
			return
		}
		go func() {
			if !b.pass() { // a new connection waits too before it reaches the server
				return
			}
			out, err := net.Dial("tcp", b.target)
			if err != nil {
				in.Close()
				return
			}
			if !b.track(out) {
				in.Close()
				return
			}
			go b.pump(out, in)
			b.pump(in, out)
		}()
	}
}

// pump copies from src to dst, each chunk waiting while the hole is on.
func (b *Blackhole) pump(src, dst net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !b.pass() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (b *Blackhole) close() {
	b.ln.Close()
	b.mu.Lock()
	b.done = true
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.moved.Broadcast()
}
