package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// ClusterOptions configure an embedded JetStream cluster. The zero value
// is three nodes on loopback with random ports and temporary store
// directories.
type ClusterOptions struct {
	// Nodes is the number of servers. Default: 3.
	Nodes int
	// Name is the cluster's name. Default: "jetsaga".
	Name string
	// SyncAlways, MaxPayload, Debug: as in Options, for every node.
	SyncAlways bool
	MaxPayload int32
	Debug      bool
	// ReadyTimeout bounds the start of one node and, in StartCluster,
	// the wait until the cluster is ready (WaitReady). Default: 30s.
	ReadyTimeout time.Duration
	// Partitionable routes the traffic between nodes through proxies in
	// this process, so that Isolate can cut a node off from the others.
	// It costs a copy of every route message. Default: false, direct
	// routes; Isolate then fails.
	Partitionable bool
}

// Cluster is a JetStream cluster of nats-servers on loopback, each in a
// child process (see StartProcess; call RunChildIfRequested first thing
// in TestMain or main), so that a node can be killed with SIGKILL. The
// ports of a node (client, route, monitoring) are chosen when the cluster
// starts and stay the same across Kill, Stop and Restart, as does its
// store directory.
//
// Its methods may be called from several goroutines.
type Cluster struct {
	opts    ClusterOptions
	urls    []string // client URLs, fixed
	monitor []int    // monitoring ports, fixed
	proxy   *routeProxy

	mu      sync.Mutex // guards nodes, which grows while the cluster starts
	nodes   []*Process
	admin   []*nats.Conn // per node, for JetStream API requests
	apiTurn atomic.Int64 // which node api asks first
	http    *http.Client
}

// nodeName is the server name of node i.
func nodeName(i int) string { return "n" + strconv.Itoa(i) }

// StartCluster starts the nodes and waits until the cluster is ready: a
// meta leader elected and every node current (WaitReady). ctx bounds the
// whole start.
func StartCluster(ctx context.Context, opts ClusterOptions) (c *Cluster, err error) {
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.Nodes < 1 {
		return nil, fmt.Errorf("embedded: cluster of %d nodes", opts.Nodes)
	}
	if opts.Name == "" {
		opts.Name = "jetsaga"
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 30 * time.Second
	}
	c = &Cluster{opts: opts, http: &http.Client{Timeout: 2 * time.Second}}
	started := c // the results are nil on an error
	defer func() {
		if err != nil {
			started.Close()
		}
	}()
	// The ports are free when picked, but a node binds them only when it
	// starts: another process may take one in between. The nodes then
	// start again, on fresh ports.
	for attempt := 1; ; attempt++ {
		err = c.startNodes()
		if err == nil {
			break
		}
		if !errors.Is(err, ErrAddrInUse) || attempt == maxPortAttempts || ctx.Err() != nil {
			return nil, err
		}
		c.stopNodes()
	}
	n := opts.Nodes
	for i := range n {
		nc, err := nats.Connect(c.urls[i], nats.Name("jetsaga-cluster-admin"), nats.RetryOnFailedConnect(true),
			nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			return nil, fmt.Errorf("embedded: admin connection to node %d: %w", i, err)
		}
		c.admin = append(c.admin, nc)
	}
	wctx, cancel := context.WithTimeout(ctx, opts.ReadyTimeout)
	defer cancel()
	if err := c.WaitReady(wctx); err != nil {
		return nil, err
	}
	return c, nil
}

// portsPicked, if set, is called with the ports startNodes picked before
// any is bound: tests take one to see the start recover.
var portsPicked func(ports []int)

// maxPortAttempts bounds how often StartCluster picks fresh ports.
const maxPortAttempts = 5

// startNodes picks ports and starts every node (and the route proxies).
func (c *Cluster) startNodes() error {
	n := c.opts.Nodes
	perNode := 3 // client, route, monitoring
	if c.opts.Partitionable {
		perNode = 4 // and the proxy in front of the route listener
	}
	ports, err := freePorts(n * perNode)
	if err != nil {
		return err
	}
	if portsPicked != nil {
		portsPicked(ports)
	}
	routePort := make([]int, n) // where node i's routes are reached
	for i := range n {
		c.urls = append(c.urls, "nats://127.0.0.1:"+strconv.Itoa(ports[i*perNode]))
		c.monitor = append(c.monitor, ports[i*perNode+2])
		routePort[i] = ports[i*perNode+1]
	}
	if c.opts.Partitionable {
		c.proxy = newRouteProxy()
		for i := range n {
			front := ports[i*perNode+3]
			if err := c.proxy.listen(i, front, ports[i*perNode+1]); err != nil {
				return err
			}
			routePort[i] = front
		}
	}
	for i := range n {
		o := Options{
			Host:       "127.0.0.1",
			Port:       ports[i*perNode],
			MaxPayload: c.opts.MaxPayload,
			SyncAlways: c.opts.SyncAlways,
			Debug:      c.opts.Debug,
			// a child's ReadyTimeout is its own start; the cluster's bounds the wait for READY
			ReadyTimeout: c.opts.ReadyTimeout,
			ServerName:   nodeName(i),
			ClusterName:  c.opts.Name,
			ClusterPort:  ports[i*perNode+1],
			MonitorPort:  ports[i*perNode+2],
		}
		if c.opts.Partitionable {
			o.ClusterAdvertise = "127.0.0.1:" + strconv.Itoa(routePort[i])
		}
		for j := range n {
			if j != i {
				o.Routes = append(o.Routes, "nats-route://127.0.0.1:"+strconv.Itoa(routePort[j]))
			}
		}
		p, err := StartProcess(o)
		if err != nil {
			return fmt.Errorf("embedded: node %d: %w", i, err)
		}
		c.mu.Lock()
		c.nodes = append(c.nodes, p)
		c.mu.Unlock()
		if c.proxy != nil {
			c.proxy.setID(i, p.ID())
		}
	}
	return nil
}

// stopNodes stops what startNodes started and forgets the ports.
func (c *Cluster) stopNodes() {
	c.mu.Lock()
	nodes := c.nodes
	c.nodes = nil
	c.mu.Unlock()
	for _, p := range nodes {
		p.closeWithin(10 * time.Second)
	}
	if c.proxy != nil {
		c.proxy.close()
		c.proxy = nil
	}
	c.urls, c.monitor = nil, nil
}

// freePorts returns n distinct loopback ports that were free a moment
// ago (another process may still take one before a server binds it).
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("embedded: free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Size returns the number of nodes.
func (c *Cluster) Size() int { return len(c.urls) }

// ClientURL returns node i's client URL; it stays the same across
// restarts.
func (c *Cluster) ClientURL(i int) string { return c.urls[i] }

// ClientURLs returns every node's client URL, comma-separated, as
// nats.Connect takes its seed list.
func (c *Cluster) ClientURLs() string { return strings.Join(c.urls, ",") }

// Name returns node i's server name, as JetStream reports leaders and
// peers.
func (c *Cluster) Name(i int) string { return nodeName(i) }

// Index returns the index of the node with server name name, or -1.
func (c *Cluster) Index(name string) int {
	for i := range c.urls {
		if nodeName(i) == name {
			return i
		}
	}
	return -1
}

// Connect opens a client connection that knows every node (the seed
// list in random order, as nats.go picks) and reconnects forever, so
// that it survives the loss of any node.
func (c *Cluster) Connect(opts ...nats.Option) (*nats.Conn, error) {
	base := []nats.Option{nats.Name("jetsaga"), nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}
	return nats.Connect(c.ClientURLs(), append(base, opts...)...)
}

// ConnectTo is Connect, connected to node i first: the others are its
// fallbacks, tried in order when node i is down.
func (c *Cluster) ConnectTo(i int, opts ...nats.Option) (*nats.Conn, error) {
	urls := append([]string{c.urls[i]}, c.urls[i+1:]...)
	urls = append(urls, c.urls[:i]...)
	base := []nats.Option{nats.Name("jetsaga-" + nodeName(i)), nats.MaxReconnects(-1),
		nats.ReconnectWait(50 * time.Millisecond), nats.DontRandomize()}
	return nats.Connect(strings.Join(urls, ","), append(base, opts...)...)
}

func (c *Cluster) node(i int) (*Process, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.nodes) {
		return nil, fmt.Errorf("embedded: no node %d in a cluster of %d", i, len(c.nodes))
	}
	return c.nodes[i], nil
}

// Running reports whether node i runs.
func (c *Cluster) Running(i int) bool {
	p, err := c.node(i)
	return err == nil && p.Running()
}

// Kill sends SIGKILL to node i and waits until it died.
func (c *Cluster) Kill(i int) error {
	p, err := c.node(i)
	if err != nil {
		return err
	}
	return p.Kill()
}

// Stop shuts node i down gracefully and waits until it stopped.
func (c *Cluster) Stop(i int) error {
	p, err := c.node(i)
	if err != nil {
		return err
	}
	return p.Stop()
}

// Restart starts node i again after Kill or Stop, on the same ports and
// store directory, and returns once it accepts connections. It rejoins
// the cluster and catches up in the background: WaitReady waits for that.
func (c *Cluster) Restart(i int) error {
	p, err := c.node(i)
	if err != nil {
		return err
	}
	if err := p.Restart(); err != nil {
		return err
	}
	if c.proxy != nil {
		c.proxy.setID(i, p.ID())
	}
	return nil
}

// Isolate cuts node i off from the other nodes, as a network partition
// would: its route connections are closed and new ones refused until
// Heal. Clients stay connected to it. It needs
// ClusterOptions.Partitionable.
func (c *Cluster) Isolate(i int) error {
	if c.proxy == nil {
		return errors.New("embedded: Isolate needs ClusterOptions.Partitionable")
	}
	if i < 0 || i >= c.Size() {
		return fmt.Errorf("embedded: no node %d in a cluster of %d", i, c.Size())
	}
	c.proxy.isolate(i, true)
	return nil
}

// Heal lets node i reach the other nodes again after Isolate; the nodes
// reconnect their routes by themselves.
func (c *Cluster) Heal(i int) error {
	if c.proxy == nil {
		return errors.New("embedded: Heal needs ClusterOptions.Partitionable")
	}
	if i < 0 || i >= c.Size() {
		return fmt.Errorf("embedded: no node %d in a cluster of %d", i, c.Size())
	}
	c.proxy.isolate(i, false)
	return nil
}

// WaitReady waits until every running node reports itself healthy
// (nats-server's /healthz: it knows the meta leader and every stream and
// consumer it hosts is current), or ctx ends.
func (c *Cluster) WaitReady(ctx context.Context) error {
	var why string
	for {
		why = ""
		for i := range c.urls {
			if !c.Running(i) {
				continue
			}
			if err := c.healthz(ctx, i); err != nil {
				why = fmt.Sprintf("node %d: %v", i, err)
				break
			}
		}
		if why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: cluster: %s", ErrNotReady, why)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) healthz(ctx context.Context, i int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		"http://127.0.0.1:"+strconv.Itoa(c.monitor[i])+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var h struct {
		Status string `json:"status"`
		Error  string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return fmt.Errorf("healthz: %w", err)
	}
	if resp.StatusCode != http.StatusOK || h.Status != "ok" {
		return fmt.Errorf("healthz %d %s: %s", resp.StatusCode, h.Status, h.Error)
	}
	return nil
}

// validStream refuses a stream name that could act as more than one
// subject token.
func validStream(name string) error {
	if name == "" || strings.ContainsAny(name, ".*> \t\r\n") {
		return fmt.Errorf("embedded: invalid stream name %q", name)
	}
	return nil
}

// apiResponse is the part of a JetStream API response the cluster reads.
type apiResponse struct {
	Error *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
	Success bool `json:"success"`
	Cluster *struct {
		Leader   string `json:"leader"`
		Replicas []struct {
			Name    string `json:"name"`
			Current bool   `json:"current"`
			Offline bool   `json:"offline"`
		} `json:"replicas"`
	} `json:"cluster"`
}

// api makes a JetStream API request through a node that runs, is
// connected and is not isolated.
func (c *Cluster) api(ctx context.Context, subject string) (*apiResponse, error) {
	// Ask the nodes in turn: one node's answer can be stale for a while
	// after a leader change (it may report no leader where the others
	// know one), and polling the same node would wait that out.
	var nc *nats.Conn
	start := int(c.apiTurn.Add(1))
	for k := range c.admin {
		i := (start + k) % len(c.admin)
		if a := c.admin[i]; c.Running(i) && a.IsConnected() && (c.proxy == nil || !c.proxy.isIsolated(i)) {
			nc = a
			break
		}
	}
	if nc == nil {
		return nil, errors.New("no node to ask")
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	m, err := nc.RequestWithContext(rctx, subject, nil)
	if err != nil {
		return nil, err
	}
	var r apiResponse
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", subject, err)
	}
	if r.Error != nil {
		return &r, fmt.Errorf("%s: %d %s", subject, r.Error.ErrCode, r.Error.Description)
	}
	return &r, nil
}

// LeaderOf returns the index of the node that leads stream, waiting until
// the stream has a leader that runs and whose peers are all current (or
// offline), or ctx ends.
func (c *Cluster) LeaderOf(ctx context.Context, stream string) (int, error) {
	return c.awaitLeader(ctx, stream, -1)
}

// awaitLeader waits until stream has a running leader other than not.
func (c *Cluster) awaitLeader(ctx context.Context, stream string, not int) (int, error) {
	if err := validStream(stream); err != nil {
		return -1, err
	}
	var why string
	for {
		r, err := c.api(ctx, "$JS.API.STREAM.INFO."+stream)
		switch {
		case err != nil:
			why = err.Error()
		case r.Cluster == nil || r.Cluster.Leader == "":
			why = "no leader"
		default:
			i := c.Index(r.Cluster.Leader)
			switch {
			case i < 0:
				why = "leader " + r.Cluster.Leader + " is not a node of this cluster"
			case i == not:
				why = "leader still " + r.Cluster.Leader
			case !c.Running(i):
				why = "leader " + r.Cluster.Leader + " is down"
			default:
				return i, nil
			}
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("embedded: leader of stream %s: %s: %w", stream, why, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// StepDown makes stream's leader step down and returns the index of the
// new leader, once elected: another node than the old leader (it asks
// again every 5 s while the old one wins the election again).
func (c *Cluster) StepDown(ctx context.Context, stream string) (int, error) {
	old, err := c.LeaderOf(ctx, stream)
	if err != nil {
		return -1, err
	}
	for {
		if _, err := c.api(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream); err != nil {
			return -1, fmt.Errorf("embedded: step down: %w", err)
		}
		// A leader that steps down while no other replica is current (one
		// that just restarted and still catches up) can win the election
		// again: ask again, until another node leads or ctx ends.
		actx, cancel := context.WithTimeout(ctx, stepDownWait)
		next, err := c.awaitLeader(actx, stream, old)
		cancel()
		if err == nil || ctx.Err() != nil {
			if err != nil {
				return c.awaitLeader(ctx, stream, old) // ctx's error, with why
			}
			return next, nil
		}
	}
}

// stepDownWait is how long StepDown waits for another leader before it
// asks the leader to step down again.
const stepDownWait = 5 * time.Second

// Close stops every node gracefully (one that does not stop within 10s
// is killed), closes the proxies and removes the store directories.
// Nothing of the cluster listens afterwards.
func (c *Cluster) Close() error {
	for _, nc := range c.admin {
		nc.Close()
	}
	c.mu.Lock()
	nodes := c.nodes
	c.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, p := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.closeWithin(10 * time.Second)
		}()
	}
	wg.Wait()
	if c.proxy != nil {
		c.proxy.close()
	}
	return errors.Join(errs...)
}
