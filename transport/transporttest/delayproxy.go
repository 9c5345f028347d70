package transporttest

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

// DelayProxy relays TCP connections on loopback to the server at
// serverURL (nats://host:port) and holds every byte a client sends for
// delay before passing it on; the server's bytes pass at once. Through it
// a client's requests reach the server delay late, as over a slow link or
// to a loaded server. It returns the URL to connect to, and stops when
// the test ends. Use it for Features.SlowLink.
func DelayProxy(t *testing.T, serverURL string, delay time.Duration) string {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatalf("DelayProxy: server URL %q: %v", serverURL, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("DelayProxy: %v", err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	track := func(cs ...net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if conns == nil {
			return false // closed
		}
		conns = append(conns, cs...)
		return true
	}
	conns = []net.Conn{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return // closed
			}
			out, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
			if err != nil {
				in.Close()
				continue
			}
			if !track(in, out) {
				in.Close()
				out.Close()
				return
			}
			wg.Add(2)
			go func() {
				defer wg.Done()
				io.Copy(in, out)
				in.Close()
			}()
			go func() {
				defer wg.Done()
				delayCopy(out, in, delay)
				out.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		conns = nil
		mu.Unlock()
		wg.Wait()
	})
	return "nats://" + l.Addr().String()
}

// delayCopy copies src to dst, each chunk delay after it was read.
func delayCopy(dst io.Writer, src io.Reader, delay time.Duration) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	ch := make(chan chunk, 1024)
	go func() {
		defer close(ch)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				ch <- chunk{b[:n], time.Now().Add(delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range ch {
		time.Sleep(time.Until(c.at)) // the link's latency itself
		if _, err := dst.Write(c.b); err != nil {
			for range ch {
			}
			return
		}
	}
}
