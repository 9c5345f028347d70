package embedded

import (
	"bytes"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// ForceReplicas returns a connection option under which every stream the
// connection creates or updates through the JetStream API has at least
// replicas replicas: it rewrites num_replicas in the requests
// ($JS.API.STREAM.CREATE.* and $JS.API.STREAM.UPDATE.*) on their way to
// the server. It lets test suites written without a Replicas setting
// (transporttest, timeouttest) run on replicated streams on a Cluster.
// Consumers inherit their stream's replicas. For tests only: a program
// sets Replicas in its configuration.
func ForceReplicas(replicas int) nats.Option {
	return nats.SetCustomDialer(replicaDialer{replicas: replicas})
}

type replicaDialer struct{ replicas int }

func (d replicaDialer) Dial(network, address string) (net.Conn, error) {
	c, err := (&net.Dialer{Timeout: 2 * time.Second}).Dial(network, address)
	if err != nil {
		return nil, err
	}
	return &replicaConn{Conn: c, replicas: d.replicas}, nil
}

// replicaConn parses the client protocol it writes (CONNECT, PUB, HPUB,
// SUB, PING, ...) and rewrites the payload of stream create and update
// requests.
type replicaConn struct {
	net.Conn
	replicas int
	mu       sync.Mutex
	pending  []byte // bytes written but not yet forwarded: an incomplete command
}

const (
	streamCreate = "$JS.API.STREAM.CREATE."
	streamUpdate = "$JS.API.STREAM.UPDATE."
)

func (c *replicaConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending = append(c.pending, p...)
	var out []byte
	for {
		n, cmd := c.next(c.pending)
		if n == 0 {
			break
		}
		out = append(out, cmd...)
		c.pending = c.pending[n:]
	}
	if len(c.pending) == 0 {
		c.pending = nil
	}
	if len(out) > 0 {
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// next returns the length of the first complete command in b (0 if b
// holds none yet) and the bytes to send for it.
func (c *replicaConn) next(b []byte) (int, []byte) {
	eol := bytes.Index(b, []byte("\r\n"))
	if eol < 0 {
		return 0, nil
	}
	line := string(b[:eol])
	op, args, _ := strings.Cut(line, " ")
	fields := strings.Fields(args)
	var hdr, total int
	switch strings.ToUpper(op) {
	case "PUB": // PUB <subject> [reply] <size>
		if len(fields) < 2 {
			return eol + 2, b[:eol+2]
		}
		total, _ = strconv.Atoi(fields[len(fields)-1])
	case "HPUB": // HPUB <subject> [reply] <header size> <total size>
		if len(fields) < 3 {
			return eol + 2, b[:eol+2]
		}
		hdr, _ = strconv.Atoi(fields[len(fields)-2])
		total, _ = strconv.Atoi(fields[len(fields)-1])
	default:
		return eol + 2, b[:eol+2]
	}
	end := eol + 2 + total + 2
	if len(b) < end {
		return 0, nil
	}
	subj := fields[0]
	if !strings.HasPrefix(subj, streamCreate) && !strings.HasPrefix(subj, streamUpdate) || hdr > total {
		return end, b[:end]
	}
	body := b[eol+2+hdr : eol+2+total]
	nb, ok := c.rewrite(body)
	if !ok {
		return end, b[:end]
	}
	fields[len(fields)-1] = strconv.Itoa(hdr + len(nb))
	var cmd []byte
	cmd = append(cmd, op+" "+strings.Join(fields, " ")+"\r\n"...)
	cmd = append(cmd, b[eol+2:eol+2+hdr]...)
	cmd = append(cmd, nb...)
	cmd = append(cmd, "\r\n"...)
	return end, cmd
}

// rewrite raises num_replicas in a stream config to c.replicas.
func (c *replicaConn) rewrite(body []byte) ([]byte, bool) {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(body, &cfg); err != nil {
		return nil, false
	}
	var r int
	if raw, ok := cfg["num_replicas"]; ok {
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, false
		}
	}
	if r >= c.replicas {
		return nil, false
	}
	cfg["num_replicas"] = json.RawMessage(strconv.Itoa(c.replicas))
	nb, err := json.Marshal(cfg)
	return nb, err == nil
}
