package embedded

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// routeProxy relays the route connections of a partitionable cluster: a
// listener in front of each node's route listener (the port the node
// advertises and the others dial), so that Isolate can cut a node off.
// A route connection is made by either of its two nodes; the dialer
// names itself in its first line (CONNECT {"name":"<server ID>",...}),
// which the proxy reads to know both ends.
type routeProxy struct {
	mu        sync.Mutex
	ids       map[int]string // node → server ID of its current start
	isolated  map[int]bool
	listeners []net.Listener
	conns     map[*relay]struct{}
	wg        sync.WaitGroup
}

// relay is one relayed route connection.
type relay struct {
	target   int    // the node dialed
	dialerID string // the dialing node's server ID, once read
	in, out  net.Conn
}

func newRouteProxy() *routeProxy {
	return &routeProxy{ids: map[int]string{}, isolated: map[int]bool{}, conns: map[*relay]struct{}{}}
}

func (p *routeProxy) setID(i int, id string) {
	p.mu.Lock()
	p.ids[i] = id
	p.mu.Unlock()
}

// listen relays connections to port front on to node's route port back.
func (p *routeProxy) listen(node, front, back int) error {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(front))
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%w: route proxy: %w", ErrAddrInUse, err)
	}
	if err != nil {
		return fmt.Errorf("embedded: route proxy: %w", err)
	}
	p.mu.Lock()
	p.listeners = append(p.listeners, l)
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return // closed
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.relay(node, c, back)
			}()
		}
	}()
	return nil
}

// nodeOf returns the node whose current server ID is id, or -1. p.mu held.
func (p *routeProxy) nodeOf(id string) int {
	for i, x := range p.ids {
		if x == id && id != "" {
			return i
		}
	}
	return -1
}

// cut reports whether r must not run. p.mu held.
func (p *routeProxy) cut(r *relay) bool {
	if p.isolated[r.target] {
		return true
	}
	d := p.nodeOf(r.dialerID)
	return d >= 0 && p.isolated[d]
}

func (p *routeProxy) relay(target int, in net.Conn, back int) {
	r := &relay{target: target, in: in}
	p.mu.Lock()
	if p.cut(r) {
		p.mu.Unlock()
		in.Close()
		return
	}
	p.conns[r] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, r)
		p.mu.Unlock()
		in.Close()
		if r.out != nil {
			r.out.Close()
		}
	}()
	out, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(back), 2*time.Second)
	if err != nil {
		return // the node is down: the dialer retries
	}
	p.mu.Lock()
	r.out = out
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		io.Copy(in, out) // the node's INFO and everything after
		in.Close()
		close(done)
	}()
	// The dialer's first line names it.
	br := bufio.NewReader(in)
	in.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := br.ReadString('\n')
	in.SetReadDeadline(time.Time{})
	if err != nil {
		out.Close()
		<-done
		return
	}
	if js, ok := strings.CutPrefix(line, "CONNECT "); ok {
		var ci struct {
			Name string `json:"name"`
		}
		if json.Unmarshal([]byte(strings.TrimSpace(js)), &ci) == nil {
			p.mu.Lock()
			r.dialerID = ci.Name
			cut := p.cut(r)
			p.mu.Unlock()
			if cut {
				out.Close()
				<-done
				return
			}
		}
	}
	if _, err := io.WriteString(out, line); err == nil {
		io.Copy(out, br)
	}
	out.Close()
	<-done
}

// isolate cuts node off (on) or lets it reconnect (off).
func (p *routeProxy) isolate(node int, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.isolated[node] = on
	if !on {
		return
	}
	for r := range p.conns {
		if p.cut(r) {
			r.in.Close()
			if r.out != nil {
				r.out.Close()
			}
		}
	}
}

func (p *routeProxy) isIsolated(node int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.isolated[node]
}

func (p *routeProxy) close() {
	p.mu.Lock()
	for _, l := range p.listeners {
		l.Close()
	}
	for r := range p.conns {
		r.in.Close()
		if r.out != nil {
			r.out.Close()
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}
