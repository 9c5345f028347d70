//go:build unix

// Command tombstonecache shows that nats-server (2.15.2) reloads a stream's
// last message block from disk for every few activations of message
// schedules made more than 10 s before they fire, when another stream
// sources the activations.
//
// When the scheduler fires a schedule it stores the activation and then
// removes the schedule. The removal writes a delete tombstone into the last
// block, and writing it sets the block's last-write time to the removed
// message's timestamp: the time the schedule was made, not now
// (msgBlock.writeMsgRecordLocked, mb.lwts = ts). The source consumer of the
// sourcing stream reads each activation as the block's newest message and
// then tries to expire the block's cache (LoadNextMsg → tryForceExpireCache),
// which succeeds when the block looks idle for longer than the cache
// expiry (10 s). With the tombstone's old timestamp it does, so the next
// activation's write reloads the whole block from disk (setupWriteCache →
// loadMsgsWithLock).
//
// The program fires the same number of schedules twice, each time on
// streams of its own, in one process with an embedded server:
//
//   - young: the schedules made 1 s before they fire;
//   - old:   the schedules made -age (11 s) before they fire;
//
// and prints for each the bytes the process read from files (rchar in
// /proc/self/io: the embedded server's block loads, the client being
// connected in-process), the CPU time and the time from the first due time
// to the last activation sourced. Expected: about the same for both.
// Observed: the old schedules read the last block again and again.
//
//	go run ./tombstonecache            # 50,000 schedules per case, ~20 s
//	go run ./tombstonecache -quick     # 500, -age 1s: runs through, shows nothing
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type config struct {
	n      int           // schedules per case
	age    time.Duration // how long before they fire the old schedules are made
	spread time.Duration // their due times spread over this
	reader string        // "source" or "none"
	dir    string        // store directory; a temporary one if empty
}

func main() {
	var cfg config
	flag.IntVar(&cfg.n, "n", 50_000, "schedules per case")
	flag.DurationVar(&cfg.age, "age", 11*time.Second, "age of the old schedules when they fire; the effect needs more than nats-server's cache expiry (10 s)")
	flag.DurationVar(&cfg.spread, "spread", time.Second, "the due times of each case spread over this")
	flag.StringVar(&cfg.reader, "reader", "source", "what reads the activations: source (a stream that sources them) or none")
	flag.StringVar(&cfg.dir, "dir", "", "JetStream store directory (default: a temporary directory, removed at the end)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (client and servers) to this file")
	quick := flag.Bool("quick", false, "a smoke run: -n 500 -age 1s -spread 200ms unless set (too young to show the effect)")
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *quick {
		if !set["n"] {
			cfg.n = 500
		}
		if !set["age"] {
			cfg.age = time.Second
		}
		if !set["spread"] {
			cfg.spread = 200 * time.Millisecond
		}
	}
	stop := func() {}
	if *cpuProfile != "" {
		var err error
		if stop, err = startCPUProfile(*cpuProfile); err != nil {
			fmt.Fprintln(os.Stderr, "tombstonecache:", err)
			os.Exit(1)
		}
	}
	err := run(context.Background(), cfg, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tombstonecache:", err)
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

// youngAge is how long before they fire the young schedules are made.
const youngAge = time.Second

func run(ctx context.Context, cfg config, w io.Writer) error {
	if cfg.n < 1 || cfg.age < youngAge || cfg.spread <= 0 || (cfg.reader != "source" && cfg.reader != "none") {
		return fmt.Errorf("-n must be positive, -age at least %v, -spread positive, -reader source or none", youngAge)
	}
	nc, cleanup, err := startServer(cfg.dir)
	if err != nil {
		return err
	}
	defer cleanup()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "nats-server %s, nats.go %s; %d schedules per case due over %v, read by: %s\n",
		server.VERSION, nats.Version, cfg.n, cfg.spread, cfg.reader)
	if cfg.age <= 10*time.Second {
		fmt.Fprintf(w, "note: -age %v is within the 10 s cache expiry: the old case should look like the young one\n", cfg.age)
	}

	// The old schedules first: they wait -age; the young case runs
	// meanwhile when it fits, otherwise after them.
	old, err := newCase(ctx, js, "old", cfg.reader)
	if err != nil {
		return err
	}
	oldFirst := time.Now().Add(cfg.age)
	if err := old.schedule(ctx, cfg.n, oldFirst, cfg.spread); err != nil {
		return err
	}
	young, err := newCase(ctx, js, "young", cfg.reader)
	if err != nil {
		return err
	}
	var results []result
	runYoung := func() error {
		if err := young.schedule(ctx, cfg.n, time.Now().Add(youngAge), cfg.spread); err != nil {
			return err
		}
		r, err := young.measure(ctx, cfg.n)
		results = append(results, r)
		return err
	}
	// The young case takes its publishing, youngAge, the spread and the
	// activations; run it first if that ends well before the old ones fire.
	youngFirst := time.Until(oldFirst) > 2*(youngAge+cfg.spread)+5*time.Second
	if youngFirst {
		if err := runYoung(); err != nil {
			return err
		}
		if time.Until(oldFirst) < 500*time.Millisecond {
			fmt.Fprintln(w, "warning: the young case ended less than 0.5 s before the old schedules were due")
		}
	}
	r, err := old.measure(ctx, cfg.n)
	if err != nil {
		return err
	}
	results = append(results, r)
	if !youngFirst {
		if err := runYoung(); err != nil {
			return err
		}
	}

	fmt.Fprintf(w, "%-6s %12s %22s %14s %16s %16s\n", "case", "made before", "read from files", "per schedule", "CPU", "first due→last")
	var young0, old0 result
	for _, r := range results {
		fmt.Fprintf(w, "%-6s %12v %22s %14s %16v %16v\n", r.name, r.age.Round(time.Millisecond), mib(r.rchar), perSchedule(r.rchar, cfg.n), r.cpu.Round(time.Millisecond), r.took.Round(time.Millisecond))
		if r.name == "young" {
			young0 = r
		} else {
			old0 = r
		}
	}
	if young0.rchar >= 0 && old0.rchar >= 0 {
		fmt.Fprintf(w, "old/young: read from files %s, CPU %.2fx, time %.2fx\n", ratio(old0.rchar, young0.rchar),
			float64(old0.cpu)/float64(max(young0.cpu, time.Millisecond)), float64(old0.took)/float64(max(young0.took, time.Millisecond)))
	}
	return nil
}

type result struct {
	name  string
	age   time.Duration // how long before the first due time the first schedule was made
	rchar int64         // bytes read, -1 if unknown
	cpu   time.Duration
	took  time.Duration // first due time to the last activation read
}

// fireCase is one stream of schedules, and the stream that sources their
// activations (with reader "source").
type fireCase struct {
	name    string
	js      jetstream.JetStream
	sched   jetstream.Stream
	queue   jetstream.Stream // nil with reader "none"
	first   time.Time        // the first due time
	made    time.Time        // when the first schedule was made
	nextSeq uint64           // the schedule stream's last sequence once all fired
}

func newCase(ctx context.Context, js jetstream.JetStream, name, reader string) (*fireCase, error) {
	c := &fireCase{name: name, js: js}
	var err error
	// A schedule stream as an application makes one: schedules on
	// NAME.s.<i>, each targeting NAME.t.<i>, in the same stream.
	c.sched, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name:              "S_" + name,
		Subjects:          []string{name + ".s.*", name + ".t.*"},
		Storage:           jetstream.FileStorage,
		AllowMsgSchedules: true,
	})
	if err != nil {
		return nil, err
	}
	if reader == "source" {
		// A work queue that sources the activations, as a queue fed by
		// schedules would be.
		c.queue, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name:      "Q_" + name,
			Storage:   jetstream.FileStorage,
			Retention: jetstream.WorkQueuePolicy,
			Sources: []*jetstream.StreamSource{{
				Name:          "S_" + name,
				FilterSubject: name + ".t.*",
			}},
		})
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

// schedule makes n schedules due evenly over spread from first, 64 at a
// time.
func (c *fireCase) schedule(ctx context.Context, n int, first time.Time, spread time.Duration) error {
	c.first, c.made = first, time.Now()
	pending := make([]jetstream.PubAckFuture, 0, 64)
	wait := func() error {
		for _, f := range pending {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		pending = pending[:0]
		return nil
	}
	for i := range n {
		due := first.Add(time.Duration(i) * spread / time.Duration(n)).UTC().Format(time.RFC3339Nano)
		id := strconv.Itoa(i)
		f, err := c.js.PublishMsgAsync(&nats.Msg{
			Subject: c.name + ".s." + id,
			Data:    []byte(`{"a":"schedule of about a hundred bytes, as an application sends one","id":` + id + `}`),
			Header: nats.Header{
				"Nats-Schedule":        {"@at " + due},
				"Nats-Schedule-Target": {c.name + ".t." + id},
			},
		})
		if err != nil {
			return err
		}
		if pending = append(pending, f); len(pending) == cap(pending) {
			if err := wait(); err != nil {
				return err
			}
		}
	}
	if err := wait(); err != nil {
		return err
	}
	info, err := c.sched.Info(ctx)
	if err != nil {
		return err
	}
	c.nextSeq = info.State.LastSeq + uint64(n)
	if time.Now().After(first) {
		return fmt.Errorf("%s: scheduling took until after the first due time: use a smaller -n", c.name)
	}
	return nil
}

// measure waits for the first due time and then for all n activations,
// and returns what the process read and spent meanwhile.
func (c *fireCase) measure(ctx context.Context, n int) (result, error) {
	r := result{name: c.name, age: c.first.Sub(c.made)}
	select {
	case <-time.After(time.Until(c.first.Add(-100 * time.Millisecond))):
	case <-ctx.Done():
		return r, ctx.Err()
	}
	rchar0, cpu0 := readChars(), cpuTime()
	deadline := time.Now().Add(2*time.Minute + time.Duration(n)*time.Millisecond)
	for {
		done, err := c.done(ctx, n)
		if err != nil {
			return r, err
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("%s: not all %d activations arrived by %v", c.name, n, deadline)
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.took = time.Since(c.first)
	r.cpu = cpuTime() - cpu0
	if rchar1 := readChars(); rchar0 >= 0 && rchar1 >= 0 {
		r.rchar = rchar1 - rchar0
	} else {
		r.rchar = -1
	}
	return r, nil
}

// done reports whether all n activations were written and, with a
// sourcing stream, sourced.
func (c *fireCase) done(ctx context.Context, n int) (bool, error) {
	info, err := c.sched.Info(ctx)
	if err != nil {
		return false, err
	}
	if info.State.LastSeq < c.nextSeq {
		return false, nil
	}
	if c.queue == nil {
		return true, nil
	}
	qi, err := c.queue.Info(ctx)
	if err != nil {
		return false, err
	}
	return qi.State.Msgs >= uint64(n), nil
}

// startServer starts an embedded nats-server with JetStream on the file
// store in dir (a temporary directory if empty) and connects to it
// in-process: the client reads no socket, so the process's file reads are
// the server's.
func startServer(dir string) (*nats.Conn, func(), error) {
	tmp := ""
	if dir == "" {
		var err error
		if tmp, err = os.MkdirTemp("", "tombstonecache-*"); err != nil {
			return nil, nil, err
		}
		dir = tmp
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: "tombstonecache",
		DontListen: true,
		JetStream:  true,
		StoreDir:   dir,
		NoSigs:     true,
	})
	if err != nil {
		os.RemoveAll(tmp)
		return nil, nil, err
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		os.RemoveAll(tmp)
		return nil, nil, errors.New("nats-server not ready within 10 s")
	}
	nc, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		srv.Shutdown()
		os.RemoveAll(tmp)
		return nil, nil, err
	}
	return nc, func() {
		nc.Close()
		srv.Shutdown()
		srv.WaitForShutdown()
		os.RemoveAll(tmp)
	}, nil
}

// readChars returns the bytes this process has read with read(2) and
// pread(2) (rchar in /proc/self/io), or -1 where there is no such file.
func readChars() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// cpuTime returns the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func mib(b int64) string {
	if b < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

func perSchedule(b int64, n int) string {
	if b < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f B", float64(b)/float64(n))
}

func ratio(a, b int64) string {
	if b <= 0 {
		return fmt.Sprintf("%s vs %s", mib(a), mib(b))
	}
	return fmt.Sprintf("%.1fx", float64(a)/float64(b))
}
