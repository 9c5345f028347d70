//go:build unix

// Command r1batch shows that on nats-server (2.15.2) an atomic batch
// publish (ADR-50) on a stream with one replica and file storage costs
// about twenty times two plain publishes, where on a replicated stream it
// costs less than they do.
//
// On an R1 file stream the server stages each batch in a file store of
// its own, created for the batch in the stream's store directory with
// SyncOnFlush, and commits from there (newBatchStore in
// server/jetstream_batching.go); everywhere else it stages the batch in
// memory. So each batch on R1 creates a directory and files, flushes them
// with an fsync and removes them again.
//
// The program writes the same pairs of messages two ways, taking turns
// in rounds, on each of:
//
//   - R1, file storage;
//   - R1, memory storage (the batch staged in memory);
//   - R3, file storage, on a 3-node cluster in this process (-r3=false
//     to skip it);
//
// as two plain publishes, each waiting for its acknowledgement, and as
// one atomic batch of the same two messages (the first published, the
// second a request with Nats-Batch-Commit). It prints the time and the
// process's CPU per pair, and the ratio batch / plain. Expected: a batch
// costs about what two publishes do, or less, on every stream.
// Observed: on the R1 file stream it costs many times more.
//
//	go run ./r1batch            # 2,000 pairs per way and stream
//	go run ./r1batch -quick     # 20, without the cluster
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type config struct {
	n      int    // pairs per way and stream
	rounds int    // turns each way takes
	r3     bool   // also on a 3-node cluster
	dir    string // store directory; a temporary one if empty
}

func main() {
	var cfg config
	flag.IntVar(&cfg.n, "n", 2000, "pairs of messages per way and stream")
	flag.IntVar(&cfg.rounds, "rounds", 5, "rounds: each way writes n/rounds pairs per round, taking turns")
	flag.BoolVar(&cfg.r3, "r3", true, "also on an R3 stream of a 3-node cluster in this process")
	flag.StringVar(&cfg.dir, "dir", "", "JetStream store directory (default: a temporary directory, removed at the end); put it on tmpfs to see the fsync's share")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (client and servers) to this file")
	quick := flag.Bool("quick", false, "a smoke run: -n 20 -rounds 2 -r3=false unless set")
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *quick {
		if !set["n"] {
			cfg.n = 20
		}
		if !set["rounds"] {
			cfg.rounds = 2
		}
		if !set["r3"] {
			cfg.r3 = false
		}
	}
	stop := func() {}
	if *cpuProfile != "" {
		var err error
		if stop, err = startCPUProfile(*cpuProfile); err != nil {
			fmt.Fprintln(os.Stderr, "r1batch:", err)
			os.Exit(1)
		}
	}
	err := run(context.Background(), cfg, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "r1batch:", err)
		os.Exit(1)
	}
}

// startCPUProfile writes a CPU profile to path until the returned
// function is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

func run(ctx context.Context, cfg config, w io.Writer) error {
	if cfg.n < 1 || cfg.rounds < 1 {
		return errors.New("-n and -rounds must be positive")
	}
	dir := cfg.dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "r1batch-*")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	fmt.Fprintf(w, "nats-server %s, nats.go %s; %d pairs per way and stream in %d rounds; store in %s\n",
		server.VERSION, nats.Version, cfg.n, cfg.rounds, dir)
	fmt.Fprintf(w, "%-22s %22s %22s %16s %12s\n", "stream", "2 publishes (per pair)", "batch of 2 (per pair)", "batch / plain", "CPU ratio")

	one, err := startNode(filepath.Join(dir, "single"), "single", nil)
	if err != nil {
		return err
	}
	defer one.stop()
	for _, storage := range []jetstream.StorageType{jetstream.FileStorage, jetstream.MemoryStorage} {
		if err := compare(ctx, w, cfg, one.nc, storage, 1); err != nil {
			return err
		}
	}
	if !cfg.r3 {
		return nil
	}
	nodes, err := startCluster(filepath.Join(dir, "cluster"), 3)
	if err != nil {
		return err
	}
	defer func() {
		for _, n := range nodes {
			n.stop()
		}
	}()
	return compare(ctx, w, cfg, nodes[0].nc, jetstream.FileStorage, 3)
}

// compare creates a stream with storage and replicas and prints what a
// pair of messages costs written both ways.
func compare(ctx context.Context, w io.Writer, cfg config, nc *nats.Conn, storage jetstream.StorageType, replicas int) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("BATCH_%s_R%d", storage, replicas)
	// A cluster whose meta leader is elected may not know its other peers
	// yet: "no suitable peers for placement" (10005) until they report.
	var s jetstream.Stream
	for deadline := time.Now().Add(30 * time.Second); ; {
		s, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name:               name,
			Subjects:           []string{name + ".>"},
			Storage:            storage,
			Replicas:           replicas,
			AllowAtomicPublish: true,
		})
		var apiErr *jetstream.APIError
		if err == nil || !errors.As(err, &apiErr) || apiErr.ErrorCode != 10005 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	if !s.CachedInfo().Config.AllowAtomicPublish {
		return fmt.Errorf("stream %s: the server did not keep AllowAtomicPublish", name)
	}
	defer js.DeleteStream(context.WithoutCancel(ctx), name)
	if err := waitLeader(ctx, s); err != nil {
		return err
	}
	ways := []struct {
		name  string
		write func(ctx context.Context, i int) error
	}{
		{"plain", func(ctx context.Context, i int) error { return plainPair(ctx, js, name, i) }},
		{"batch", func(ctx context.Context, i int) error { return batchPair(ctx, nc, name, i) }},
	}
	// A few of each first, outside the measurement.
	for _, way := range ways {
		for i := range 3 {
			if err := way.write(ctx, -1-i); err != nil {
				return fmt.Errorf("%s, %s: %w", name, way.name, err)
			}
		}
	}
	per := max(1, cfg.n/cfg.rounds)
	took := make([][]time.Duration, len(ways)) // per pair, per round
	cpu := make([][]time.Duration, len(ways))
	for round := range cfg.rounds {
		for k := range ways {
			wi := (k + round) % len(ways) // the other first every other round
			way := ways[wi]
			start, cpu0 := time.Now(), cpuTime()
			for i := range per {
				if err := way.write(ctx, round*per+i); err != nil {
					return fmt.Errorf("%s, %s: %w", name, way.name, err)
				}
			}
			took[wi] = append(took[wi], time.Since(start)/time.Duration(per))
			cpu[wi] = append(cpu[wi], (cpuTime()-cpu0)/time.Duration(per))
		}
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	if want := uint64(2 * (3*len(ways) + cfg.rounds*per*len(ways))); info.State.Msgs != want {
		return fmt.Errorf("stream %s holds %d messages, want %d", name, info.State.Msgs, want)
	}
	plain, batch := medianDur(took[0]), medianDur(took[1])
	fmt.Fprintf(w, "%-22s %22s %22s %15.2fx %11.2fx\n", fmt.Sprintf("R%d %s", replicas, storage),
		fmt.Sprintf("%v (CPU %v)", plain.Round(time.Microsecond), medianDur(cpu[0]).Round(time.Microsecond)),
		fmt.Sprintf("%v (CPU %v)", batch.Round(time.Microsecond), medianDur(cpu[1]).Round(time.Microsecond)),
		float64(batch)/float64(plain), float64(medianDur(cpu[1]))/float64(max(medianDur(cpu[0]), time.Microsecond)))
	return nil
}

// plainPair publishes two messages, each waiting for its acknowledgement.
func plainPair(ctx context.Context, js jetstream.JetStream, stream string, i int) error {
	for _, part := range []string{"a", "b"} {
		if _, err := js.Publish(ctx, stream+"."+part+"."+strconv.Itoa(i), payload); err != nil {
			return err
		}
	}
	return nil
}

// batchPair writes the same two messages as one atomic batch: the first
// published without a reply, the second a request that commits the batch
// and gets its acknowledgement.
func batchPair(ctx context.Context, nc *nats.Conn, stream string, i int) error {
	id := "b" + strconv.Itoa(i) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	first := &nats.Msg{Subject: stream + ".a." + strconv.Itoa(i), Data: payload, Header: nats.Header{
		"Nats-Batch-Id":       {id},
		"Nats-Batch-Sequence": {"1"},
	}}
	if err := nc.PublishMsg(first); err != nil {
		return err
	}
	commit := &nats.Msg{Subject: stream + ".b." + strconv.Itoa(i), Data: payload, Header: nats.Header{
		"Nats-Batch-Id":       {id},
		"Nats-Batch-Sequence": {"2"},
		"Nats-Batch-Commit":   {"1"},
	}}
	resp, err := nc.RequestMsgWithContext(ctx, commit)
	if err != nil {
		return err
	}
	var ack struct {
		Count int                 `json:"count"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return fmt.Errorf("batch ack %q: %w", resp.Data, err)
	}
	if ack.Error != nil {
		return ack.Error
	}
	if ack.Count != 2 {
		return fmt.Errorf("batch ack %q: want a count of 2", resp.Data)
	}
	return nil
}

var payload = []byte(`{"saga":"twofactor","instance":"b7f3c2a4-5e1d-4c8a-9f20-3d6e8a1b0c57","state":"pending"}`)

// waitLeader waits until the stream has a leader (at once on one server).
func waitLeader(ctx context.Context, s jetstream.Stream) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := s.Info(ctx)
		if err == nil && info.Cluster != nil && (info.Cluster.Leader != "" || len(info.Cluster.Replicas) == 0) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stream %s: no leader within 30 s (last error: %v)", s.CachedInfo().Config.Name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type node struct {
	srv *server.Server
	nc  *nats.Conn
}

func (n *node) stop() {
	n.nc.Close()
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
}

// startNode starts a server with JetStream storing in dir, and connects to
// it in-process. With cluster set, it joins that cluster.
func startNode(dir, name string, cluster *server.ClusterOpts, routes ...string) (*node, error) {
	opts := &server.Options{
		ServerName: name,
		Host:       "127.0.0.1",
		Port:       -1,
		JetStream:  true,
		StoreDir:   dir,
		NoSigs:     true,
	}
	if cluster != nil {
		opts.Cluster = *cluster
		for _, r := range routes {
			opts.Routes = append(opts.Routes, server.RoutesFromStr(r)...)
		}
	} else {
		opts.DontListen = true
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, err
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("%s: not ready within 10 s", name)
	}
	nc, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		srv.Shutdown()
		return nil, err
	}
	return &node{srv: srv, nc: nc}, nil
}

// startCluster starts n servers in this process, clustered over loopback
// routes, and waits until JetStream has a meta leader.
func startCluster(dir string, n int) ([]*node, error) {
	ports, err := freePorts(n)
	if err != nil {
		return nil, err
	}
	var nodes []*node
	stopAll := func() {
		for _, nd := range nodes {
			nd.stop()
		}
	}
	for i := range n {
		cl := &server.ClusterOpts{Name: "r1batch", Host: "127.0.0.1", Port: ports[i]}
		var routes []string
		for j, p := range ports {
			if j != i {
				routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(p))
			}
		}
		name := "n" + strconv.Itoa(i)
		nd, err := startNode(filepath.Join(dir, name), name, cl, routes...)
		if err != nil {
			stopAll()
			return nil, err
		}
		nodes = append(nodes, nd)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !slices.ContainsFunc(nodes, func(nd *node) bool { return nd.srv.JetStreamIsLeader() }) {
		if time.Now().After(deadline) {
			stopAll()
			return nil, errors.New("cluster: no JetStream meta leader within 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nodes, nil
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// cpuTime returns the process's user and system CPU time: client and
// servers, all in this process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func medianDur(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
