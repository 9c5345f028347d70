package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// millionSide is what the million bench does on one side.
type millionSide interface {
	// pilot schedules n far-future messages somewhere they are dropped
	// again, to estimate the scheduling rate.
	pilot(ctx context.Context, n int) error
	schedule(ctx context.Context, id string, due time.Time) (uint64, error)
	cancel(ctx context.Context, seq uint64) error
	// receive hands every activation to got until ctx ends.
	receive(ctx context.Context, got func(id string, enqueued time.Time) error) error
	close()
}

// runChild is main for a child process of the million bench.
func runChild(ctx context.Context, cfg config) error {
	side, ok := strings.CutPrefix(cfg.child, "million-")
	if !ok {
		return fmt.Errorf("unknown child %q", cfg.child)
	}
	srv, err := embedded.Start(embedded.Options{})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	nc, err := srv.Connect(nats.Name("jetsaga-bench-" + side))
	if err != nil {
		return err
	}
	defer nc.Close()
	var s millionSide
	switch side {
	case "raw":
		s, err = newRawMillion(ctx, nc)
	case "jetsaga":
		s, err = newJetMillion(ctx, nc, cfg.millionParts, !cfg.millionNoWait)
	default:
		s, err = newShardSide(ctx, nc, side) // the shards bench's (shards.go)
	}
	if err != nil {
		return err
	}
	defer s.close()
	if cfg.cpuProfile != "" {
		stop, err := startCPUProfile(cfg.cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	r, err := millionRun(ctx, cfg, s)
	if err != nil {
		return err
	}
	r.Side = side
	if side == "jetsaga" {
		r.Partitions = cfg.millionParts
	}
	out, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(append(out, '\n'))
	return err
}

func childProgress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

func writeHeap(cfg config, name string) {
	if cfg.memProfile == "" {
		return
	}
	runtime.GC()
	f, err := os.Create(cfg.memProfile + "." + name)
	if err != nil {
		childProgress("heap profile: %v", err)
		return
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		childProgress("heap profile: %v", err)
	}
}

func millionRun(ctx context.Context, cfg config, s millionSide) (*millionReport, error) {
	n := max(1, int(float64(millionCount)*cfg.scale))
	// Two rounds of cancels, one after the other: the first meets the
	// schedule stream's message blocks cold (the file store loads a whole
	// block, up to 8 MB, on its first read and drops it again after 10 s
	// unused), the second mostly finds them loaded.
	nCancel := min(2*cancelCount, n/2)
	r := &millionReport{N: n, Cancelled: nCancel, Bucket: millionBucket}

	// RSS, sampled every bucket; the phase in which it peaked.
	var (
		phase   atomic.Value
		peak    atomic.Int64
		peakAt  atomic.Value
		rssMu   sync.Mutex
		samples []struct {
			at  time.Time
			mib int
		}
	)
	phase.Store("scheduling")
	peakAt.Store("scheduling")
	stopRSS := every(millionBucket, func() {
		rss, _, err := readRSS()
		if err != nil {
			return
		}
		if rss > peak.Load() {
			peak.Store(rss)
			peakAt.Store(phase.Load())
		}
		rssMu.Lock()
		samples = append(samples, struct {
			at  time.Time
			mib int
		}{time.Now(), int(rss >> 20)})
		rssMu.Unlock()
	})
	defer stopRSS()

	pilotN := min(n, 10_000)
	pstart := time.Now()
	if err := s.pilot(ctx, pilotN); err != nil {
		return nil, fmt.Errorf("pilot: %w", err)
	}
	rate := float64(pilotN) / time.Since(pstart).Seconds()
	estimate := time.Duration(float64(n) / rate * 1.5 * float64(time.Second))
	// 20 s of lead at full scale, for the cancels and a margin; less on a
	// quick run.
	lead := max(5*time.Second, time.Duration(float64(millionLead)*min(1, cfg.scale)))
	if cfg.millionLead > 0 {
		lead = cfg.millionLead
	}
	lead += cfg.millionSettle
	first := time.Now().Add(estimate + lead)
	spread := cfg.spread
	due := func(i int) time.Time { return first.Add(time.Duration(i) * spread / time.Duration(n)) }
	childProgress("pilot: %s; scheduling %d, first due in %v, spread over %v", fmtRate(rate), n, time.Until(first).Round(time.Second), spread)

	cancelled := make([]bool, n)
	cancelSeq := make(map[int]uint64, nCancel)
	for len(cancelSeq) < nCancel {
		i := rand.IntN(n)
		cancelled[i], cancelSeq[i] = true, 0
	}
	var seqMu sync.Mutex
	base := nuid.Next()

	// (1) Schedule.
	var done atomic.Int64
	schedStart := time.Now()
	stopProgress := every(5*time.Second, func() { childProgress("scheduled %d of %d", done.Load(), n) })
	err := parallel(millionSchedConc, n, func(i int) error {
		seq, err := s.schedule(ctx, base+"-"+strconv.Itoa(i), due(i))
		if err != nil {
			return fmt.Errorf("schedule %d: %w", i, err)
		}
		if cancelled[i] {
			seqMu.Lock()
			cancelSeq[i] = seq
			seqMu.Unlock()
		}
		done.Add(1)
		return nil
	})
	stopProgress()
	schedEnd := time.Now()
	if err != nil {
		return nil, err
	}
	r.SchedDur = schedEnd.Sub(schedStart)
	r.SchedRate = float64(n) / r.SchedDur.Seconds()
	r.Margin = first.Sub(schedEnd)
	childProgress("scheduled %d in %v (%s); first due %v after", n, r.SchedDur.Round(time.Millisecond), fmtRate(r.SchedRate), r.Margin.Round(time.Millisecond))

	// (2) RSS with all pending.
	phase.Store("pending")
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.HeapSched = int64(ms.HeapInuse)
	if r.RSSSched, r.HWMSched, err = readRSS(); err != nil {
		return nil, err
	}
	childProgress("RSS %d MiB (peak %d MiB, Go heap in use %d MiB)", r.RSSSched>>20, r.HWMSched>>20, r.HeapSched>>20)
	writeHeap(cfg, "pending")

	// (3) Cancel, after -million-settle.
	if cfg.millionSettle > 0 {
		childProgress("settling %v before cancelling", cfg.millionSettle)
		select {
		case <-time.After(cfg.millionSettle):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	phase.Store("cancelling")
	seqs := slices.Collect(maps.Values(cancelSeq)) // map order: random
	for round, part := range [][]uint64{seqs[:len(seqs)/2], seqs[len(seqs)/2:]} {
		lat := make([]time.Duration, 0, len(part))
		roundStart := time.Now()
		var slowAt []time.Duration // when, from the round's start, each cancel over the P4 target began
		for _, seq := range part {
			start := time.Now()
			err := s.cancel(ctx, seq)
			took := time.Since(start)
			lat = append(lat, took)
			if took > cancelP99Target {
				slowAt = append(slowAt, start.Sub(roundStart))
			}
			if err != nil {
				return nil, fmt.Errorf("cancel seq %d: %w", seq, err)
			}
		}
		l := summarize(lat)
		if round == 0 {
			r.Cancel = l
		} else {
			r.CancelWarm = l
		}
		childProgress("cancelled %d in %v, %v after the scheduling: p50 %s, p99 %s; %d over %v, at %s", len(part),
			time.Since(roundStart).Round(time.Millisecond), roundStart.Sub(schedEnd).Round(time.Millisecond),
			fmtDur(l.P50), fmtDur(l.P99), len(slowAt), cancelP99Target, fmtOffsets(slowAt))
	}
	if time.Now().After(first) {
		childProgress("warning: the cancels ended %v after the first due time", time.Since(first))
	}

	// (4) Receive the rest as they fire.
	phase.Store("waiting")
	stopProfile, err := startBurstProfile(cfg)
	if err != nil {
		return nil, err
	}
	defer stopProfile()
	var msBurst runtime.MemStats
	runtime.ReadMemStats(&msBurst)
	cpuBurst := processCPU()
	want := n - nCancel
	last := due(n - 1)
	buckets := int((last.Sub(first)+2*time.Minute+time.Duration(want)*200*time.Microsecond)/millionBucket) + 1
	r.Due, r.Enqueued, r.Received = make([]int, buckets), make([]int, buckets), make([]int, buckets)
	bucket := func(t time.Time) int { return max(0, min(buckets-1, int(t.Sub(first)/millionBucket))) }
	for i := range n {
		if !cancelled[i] {
			r.Due[bucket(due(i))]++
		}
	}
	deadline := first.Add(time.Duration(buckets) * millionBucket)
	rctx, stop := context.WithDeadline(ctx, deadline)
	defer stop()
	var (
		mu                 sync.Mutex
		seen               = make([]uint8, n)
		late, enqLate      = make([]time.Duration, 0, want), make([]time.Duration, 0, want)
		lastRecv           time.Time
		allIn              = make(chan struct{})
		firing             atomic.Bool
		recvErr            = make(chan error, 1)
		prefix             = base + "-"
		got, dups, early   int
		resurrected        int
		errNotOurs         = errors.New("unexpected message")
		stopRecvProgress   func()
		recvProgressPrefix = fmt.Sprintf("waiting for %d to fire from %v on", want, time.Until(first).Round(time.Second))
	)
	childProgress("%s", recvProgressPrefix)
	stopRecvProgress = every(5*time.Second, func() {
		mu.Lock()
		g := got
		mu.Unlock()
		if g > 0 || time.Now().After(first) {
			childProgress("received %d of %d (%v after the first due)", g, want, time.Since(first).Round(time.Second))
		}
	})
	go func() {
		recvErr <- s.receive(rctx, func(id string, enqueued time.Time) error {
			now := time.Now()
			if !firing.Load() {
				firing.Store(true)
				phase.Store("firing")
			}
			i, err := strconv.Atoi(strings.TrimPrefix(id, prefix))
			if err != nil || i < 0 || i >= n || !strings.HasPrefix(id, prefix) {
				return fmt.Errorf("%w %q", errNotOurs, id)
			}
			mu.Lock()
			defer mu.Unlock()
			if seen[i]++; seen[i] > 1 {
				dups++
				return nil
			}
			if cancelled[i] {
				resurrected++
				return nil
			}
			got++
			lastRecv = now
			if now.Before(due(i)) {
				early++
			}
			late = append(late, now.Sub(due(i)))
			enqLate = append(enqLate, enqueued.Sub(due(i)))
			r.Received[bucket(now)]++
			r.Enqueued[bucket(enqueued)]++
			if got == want {
				close(allIn)
			}
			return nil
		})
	}()
	// A receiver that returns before the deadline has failed (it returns
	// only when its context ends otherwise): say so at once, rather than
	// wait for the deadline and report the rest as lost without a cause.
	stopped := false
	select {
	case <-allIn:
		// A short grace for duplicates and cancelled ones that fire late.
		select {
		case <-time.After(2 * time.Second):
		case <-rctx.Done():
		case err = <-recvErr:
			stopped = true
		}
	case <-rctx.Done():
	case err = <-recvErr:
		stopped = true
	}
	if stopped {
		childProgress("the receiver stopped %v after the first due: %v", time.Since(first).Round(time.Millisecond), err)
	}
	stop()
	if !stopped {
		err = <-recvErr
	}
	stopRecvProgress()
	stopProfile()
	r.BurstCPU = processCPU() - cpuBurst
	runtime.ReadMemStats(&ms)
	r.BurstGC, r.BurstAlloc = ms.NumGC-msBurst.NumGC, ms.TotalAlloc-msBurst.TotalAlloc
	childProgress("burst: %s", burstCPU(r))
	if err != nil && rctx.Err() == nil {
		return nil, fmt.Errorf("receive: %w", err)
	}
	mu.Lock()
	r.Got, r.Dups, r.Early, r.Resurrected = got, dups, early, resurrected
	r.Late, r.EnqLate = summarize(late), summarize(enqLate)
	r.Drain, r.LastAfterDue = lastRecv.Sub(first), lastRecv.Sub(last)
	mu.Unlock()
	if got < want {
		childProgress("only %d of %d arrived by %v after the last due time", got, want, deadline.Sub(last))
	}
	// Trim the timeline after the last receipt.
	end := bucket(lastRecv) + 2
	r.Due, r.Enqueued, r.Received = r.Due[:min(end, buckets)], r.Enqueued[:min(end, buckets)], r.Received[:min(end, buckets)]
	stopRSS()
	rssMu.Lock()
	r.RSSMiB = make([]int, len(r.Due))
	for _, smp := range samples {
		if b := int(smp.at.Sub(first) / millionBucket); b >= 0 && b < len(r.RSSMiB) {
			r.RSSMiB[b] = max(r.RSSMiB[b], smp.mib)
		}
	}
	rssMu.Unlock()
	writeHeap(cfg, "end")
	_, r.RSSPeak, _ = readRSS()
	r.PeakPhase, _ = peakAt.Load().(string)
	childProgress("drained %v after the first due, %v after the last; peak RSS %d MiB (%s)",
		r.Drain.Round(time.Millisecond), r.LastAfterDue.Round(time.Millisecond), r.RSSPeak>>20, r.PeakPhase)
	return r, nil
}

// startBurstProfile starts the CPU profile of the burst if -burstprofile
// asks for one, and returns the function that stops it (more than once is
// fine). -cpuprofile, which covers the whole child, takes precedence: the
// runtime runs one CPU profile at a time.
func startBurstProfile(cfg config) (func(), error) {
	if cfg.burstProfile == "" || cfg.cpuProfile != "" {
		return func() {}, nil
	}
	return startCPUProfile(cfg.burstProfile)
}

// startCPUProfile writes a CPU profile to path until the returned function
// is called (more than once is fine).
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				childProgress("CPU profile %s: %v", path, err)
			}
		})
	}, nil
}

// every runs fn every d until the returned function is called (more than
// once is fine).
func every(d time.Duration, fn func()) func() {
	t := time.NewTicker(d)
	quit := make(chan struct{})
	var once sync.Once
	go func() {
		for {
			select {
			case <-t.C:
				fn()
			case <-quit:
				return
			}
		}
	}()
	return func() { once.Do(func() { t.Stop(); close(quit) }) }
}

// jetMillion is jetsaga's side: one queue.
type jetMillion struct {
	b     *transport.Broker
	q     *transport.Queue
	parts int
	wait  bool // Complete rather than CompleteNoWait
}

func newJetMillion(ctx context.Context, nc *nats.Conn, parts int, wait bool) (*jetMillion, error) {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b, err := transport.NewJetStream(nc, transport.WithPrefix(benchPrefix), transport.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	q, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "million", Partitions: parts})
	if err != nil {
		return nil, err
	}
	return &jetMillion{b: b, q: q, parts: parts, wait: wait}, nil
}

func (j *jetMillion) pilot(ctx context.Context, n int) error {
	q, err := j.b.OpenQueue(ctx, transport.QueueConfig{Name: "pilot", Partitions: j.parts})
	if err != nil {
		return err
	}
	defer j.b.DeleteQueue(context.WithoutCancel(ctx), "pilot")
	base, due := nuid.Next(), time.Now().Add(time.Hour)
	return parallel(millionSchedConc, n, func(i int) error {
		_, err := q.Schedule(ctx, jetMessage(base+"-"+strconv.Itoa(i)), due)
		return err
	})
}

func (j *jetMillion) schedule(ctx context.Context, id string, due time.Time) (uint64, error) {
	return j.q.Schedule(ctx, jetMessage(id), due)
}

func (j *jetMillion) cancel(ctx context.Context, seq uint64) error { return j.q.Cancel(ctx, seq) }

func (j *jetMillion) receive(ctx context.Context, got func(string, time.Time) error) error {
	var wg sync.WaitGroup
	var receives, received atomic.Int64
	defer func() {
		if n := receives.Load(); n > 0 {
			childProgress("%d receives, %.1f messages each", n, float64(received.Load())/float64(n))
		}
	}()
	errc := make(chan error, millionRecvConc)
	for range millionRecvConc {
		wg.Go(func() {
			for {
				ds, err := j.q.Receive(ctx, 100)
				if err != nil {
					errc <- err
					return
				}
				receives.Add(1)
				received.Add(int64(len(ds)))
				if !j.wait {
					for _, d := range ds {
						if err := got(d.MessageID, d.EnqueuedAt); err != nil {
							errc <- err
							return
						}
						if err := d.CompleteNoWait(ctx); err != nil {
							errc <- err
							return
						}
					}
					continue
				}
				// Complete waits for the server's confirmation; the batch's
				// completions run concurrently, as a dispatcher's handlers do.
				var cg sync.WaitGroup
				var cerr atomic.Pointer[error]
				sem := make(chan struct{}, millionCompleteConc)
				for _, d := range ds {
					if err := got(d.MessageID, d.EnqueuedAt); err != nil {
						errc <- err
						return
					}
					sem <- struct{}{}
					cg.Go(func() {
						defer func() { <-sem }()
						if err := d.Complete(ctx); err != nil {
							cerr.Store(&err)
						}
					})
				}
				cg.Wait()
				if err := cerr.Load(); err != nil {
					errc <- *err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if ctx.Err() == nil {
			return err
		}
	}
	return nil
}

func (j *jetMillion) close() { j.b.Close() }

// rawMillion is the raw side: one schedule stream whose schedules target
// a subject of the same stream, and a plain pull consumer on it.
type rawMillion struct {
	js     jetstream.JetStream
	s      jetstream.Stream
	prefix string
}

func newRawMillion(ctx context.Context, nc *nats.Conn) (*rawMillion, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	e := &env{js: js}
	name, prefix := rawNames("S", "million")
	s, err := e.rawScheduleStream(ctx, name, prefix)
	if err != nil {
		return nil, err
	}
	return &rawMillion{js: js, s: s, prefix: prefix}, nil
}

func (r *rawMillion) pilot(ctx context.Context, n int) error {
	name, prefix := rawNames("S", "pilot")
	e := &env{js: r.js}
	if _, err := e.rawScheduleStream(ctx, name, prefix); err != nil {
		return err
	}
	defer r.js.DeleteStream(context.WithoutCancel(ctx), name)
	due := time.Now().Add(time.Hour)
	return parallel(millionSchedConc, n, func(i int) error {
		_, err := r.js.PublishMsg(ctx, rawScheduleMsg(prefix, strconv.Itoa(i), due))
		return err
	})
}

func (r *rawMillion) schedule(ctx context.Context, id string, due time.Time) (uint64, error) {
	ack, err := r.js.PublishMsg(ctx, rawScheduleMsg(r.prefix, id, due))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

func (r *rawMillion) cancel(ctx context.Context, seq uint64) error {
	return rawGuardedCancel(ctx, r.js, r.s, r.prefix, seq)
}

func (r *rawMillion) receive(ctx context.Context, got func(string, time.Time) error) error {
	c, err := r.s.CreateOrUpdateConsumer(ctx, recvConsumer(r.prefix+".f.m"))
	if err != nil {
		return err
	}
	return consumeAll(ctx, c, got)
}

func (r *rawMillion) close() {}

// fmtOffsets prints up to 12 offsets, rounded to milliseconds.
func fmtOffsets(ds []time.Duration) string {
	var b strings.Builder
	for i, d := range ds {
		if i == 12 {
			fmt.Fprintf(&b, " ... (%d more)", len(ds)-i)
			break
		}
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(d.Round(time.Millisecond).String())
	}
	return b.String()
}
