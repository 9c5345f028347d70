package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/transport"
)

const (
	baseCount     = 5000 // messages per round and side in the rate benches
	latenessCount = 10000
	cancelCount   = 2000
	defaultSpread = 10 * time.Second
	benchPrefix   = "BENCH" // jetsaga's stream and subject prefix
)

type config struct {
	scale      float64
	rounds     int
	conc       int
	spread     time.Duration
	lead       time.Duration // the lateness bench's early activation
	only       []string
	jsonPath   string
	cpuProfile string
	memProfile string
	// burstProfile: the million bench's children write a CPU profile of
	// the burst alone (from the end of the cancels to the last receipt).
	burstProfile string
	svgDir       string
	// millionParts is the partition count of the million bench's queue.
	millionParts     int
	noisyParts       int
	noisyKeyLimit    int
	noisyConcurrency int
	noisyLevels      string
	noisyQuiet       bool
	// millionNoWait: the million bench's receivers complete with
	// CompleteNoWait instead of Complete.
	millionNoWait bool
	// millionLead, if set, is the time from the estimated end of the
	// scheduling to the first due time (else 20 s × -n, at least 5 s).
	millionLead time.Duration
	// millionSettle is how long the million bench waits after scheduling
	// before it cancels (the lead grows by as much).
	millionSettle time.Duration
	// shardCounts, shardRounds and shardSides are the shards bench's -shards,
	// -shards-rounds and -shards-sides.
	shardCounts []int
	shardRounds int
	shardSides  []string
	// child names the work of a child process (-child million-raw,
	// million-jetsaga): see runChild.
	child string
	// nodes is -nodes: above 1, the benches run on a cluster of this many
	// nodes with every stream, bucket and queue replicated (replicasFor).
	nodes int
}

// env is what every bench gets: one embedded server (or, with -nodes, a
// cluster), and a connection per side so that neither inherits the
// other's client state.
type env struct {
	cfg config
	// servers is where the benches run: one server, or a cluster.
	servers clusterSetup
	ncJet   *nats.Conn
	ncRaw   *nats.Conn
	broker  *transport.Broker
	js      jetstream.JetStream // the raw side
	start   time.Time
	charts  charts
}

func newEnv(ctx context.Context, cfg config) (*env, error) {
	var srv clusterSetup
	var err error
	if cfg.nodes > 1 {
		srv, err = startNodes(ctx, cfg.nodes)
	} else {
		srv, err = startOne()
	}
	if err != nil {
		return nil, err
	}
	e := &env{cfg: cfg, servers: srv, start: time.Now()}
	if e.ncJet, err = srv.connect(nats.Name("jetsaga-bench-jetsaga")); err != nil {
		e.close()
		return nil, err
	}
	if e.ncRaw, err = srv.connect(nats.Name("jetsaga-bench-raw")); err != nil {
		e.close()
		return nil, err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if e.broker, err = transport.NewJetStream(e.ncJet, transport.WithPrefix(benchPrefix), transport.WithLogger(logger)); err != nil {
		e.close()
		return nil, err
	}
	if e.js, err = jetstream.New(e.ncRaw); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *env) close() {
	if e.broker != nil {
		e.broker.Close()
	}
	for _, nc := range []*nats.Conn{e.ncJet, e.ncRaw} {
		if nc != nil {
			nc.Close()
		}
	}
	e.servers.close()
}

// replicas is the replication factor of every stream, bucket and queue
// a bench creates: 1 on one server, and in the million bench's children,
// whose env holds only a JetStream context (no servers).
func (e *env) replicas() int { return max(1, e.servers.replicas) }

// cpu returns the CPU time, user and system, that the bench's client and
// its servers have used: this process's, plus the nodes' of a cluster.
// It returns 0 where a cluster's nodes cannot be measured.
func (e *env) cpu() time.Duration {
	if e.servers.serverCPU == nil {
		return processCPU()
	}
	nodes := e.servers.serverCPU()
	if nodes == 0 {
		return 0
	}
	return processCPU() + nodes
}

// progress reports on stderr, so that stdout holds only the results.
func (e *env) progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(e.start).Seconds(), fmt.Sprintf(format, args...))
}

// scaled applies -n to a default count.
func (e *env) scaled(n int) int { return max(1, int(float64(n)*e.cfg.scale)) }

// openQueue opens a fresh jetsaga queue that is deleted again by the
// returned function.
func (e *env) openQueue(ctx context.Context, name string) (*transport.Queue, func(), error) {
	return e.openQueueConfig(ctx, e.queueConfig(name))
}

// openQueueConfig is openQueue with a config of its own.
func (e *env) openQueueConfig(ctx context.Context, cfg transport.QueueConfig) (*transport.Queue, func(), error) {
	if err := e.broker.DeleteQueue(ctx, cfg.Name); err != nil {
		return nil, nil, err
	}
	q, err := e.broker.OpenQueue(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return q, func() { e.broker.DeleteQueue(context.WithoutCancel(ctx), cfg.Name) }, nil
}

// cpuScope says what e.cpu measures.
func (e *env) cpuScope() string {
	if e.servers.nodes > 1 {
		return fmt.Sprintf("this process (client) and the %d nodes' processes", e.servers.nodes)
	}
	return "this process (client and embedded server)"
}

// allocScope says whose heap allocations the benches count: this
// process's only.
func (e *env) allocScope() string {
	if e.servers.nodes > 1 {
		return "this process only (the client; the nodes are child processes)"
	}
	return "client and embedded server together"
}

// queueConfig is the config of the benches' jetsaga queues: the defaults,
// replicated as e.replicas says.
func (e *env) queueConfig(name string) transport.QueueConfig {
	return transport.QueueConfig{Name: name, Replicas: e.replicas()}
}

// dropStream deletes a raw stream, ignoring a missing one.
func (e *env) dropStream(ctx context.Context, name string) {
	if err := e.js.DeleteStream(context.WithoutCancel(ctx), name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		e.progress("deleting stream %s: %v", name, err)
	}
}

func printHeader(w io.Writer, e *env) {
	where := "embedded"
	if e.servers.nodes > 1 {
		where = fmt.Sprintf("%d-node cluster, child processes", e.servers.nodes)
	}
	fmt.Fprintf(w, "jetsaga-bench  %s  GOMAXPROCS=%d NumCPU=%d  nats-server %s (%s, file storage, replicas R%d)  nats.go %s\n",
		runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), e.ncRaw.ConnectedServerVersion(), where, e.replicas(), nats.Version)
	fmt.Fprintf(w, "scale -n %g; rate benches: %d rounds, sides interleaved in small steps; %d concurrent publishers\n\n",
		e.cfg.scale, e.cfg.rounds, e.cfg.conc)
}
