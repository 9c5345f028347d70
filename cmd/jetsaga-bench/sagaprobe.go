package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetsaga/jetsaga/internal/record"
	"github.com/jetsaga/jetsaga/timeout"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// saga-probe: what each candidate way of making a saga step cheaper saves,
// measured as raw nats.go loops on the P2 workload (sagaRawRound's
// streams, bucket, record and concurrency), each variant in every round,
// the order rotating, so that their ratios to the first ("today": the P2
// raw loop) compare neighbours.
//
// Variants add one change at a time:
//   - fetchN: Fetch(probeBatch) instead of Fetch(1);
//   - cache: a record cache validated by revision skips the KV Get (the
//     conditional Update fails on a stale revision);
//   - ackAsync: Ack without waiting for the server's reply instead of
//     DoubleAck;
//   - clearAsync: the second Update (clearing the outbox) published
//     without waiting; the next step on the key waits for its ack;
//   - noClear: no second Update: an outbox of timeouts only stays in the
//     stored record until the next commit (what the dispatcher does; see
//     saga's carryOutInMemory for why that is safe);
//   - atomic: state and schedule in ONE stream, committed as one ADR-50
//     atomic batch (record with Nats-Expected-Last-Subject-Sequence +
//     schedule), no outbox, so neither the separate schedule publish nor
//     the second put exists.

const probeBatch = 16

type probeVariant struct {
	name       string
	batch      int
	cache      bool
	ackAsync   bool
	clearAsync bool
	noClear    bool
	atomic     bool
}

// newDesignCalls is the variant that makes the dispatcher's present calls
// (the P2 bench's third side): saga.WithReceiveBatch's default, the record
// cache, no Put to clear an outbox of timeouts only, CompleteNoWait.
var newDesignCalls = probeVariant{name: "new design's calls", batch: 8, cache: true, ackAsync: true, noClear: true}

var probeVariants = []probeVariant{
	{name: "today", batch: 1},
	{name: "fetchN", batch: probeBatch},
	{name: "fetchN+cache", batch: probeBatch, cache: true},
	{name: "fetchN+cache+ackAsync", batch: probeBatch, cache: true, ackAsync: true},
	{name: "...+clearAsync", batch: probeBatch, cache: true, ackAsync: true, clearAsync: true},
	{name: "...+noClear", batch: probeBatch, cache: true, ackAsync: true, noClear: true},
	{name: "fetchN+cache+ackAsync+atomic", batch: probeBatch, cache: true, ackAsync: true, atomic: true},
	{name: "atomic only", batch: 1, atomic: true},
}

func benchSagaProbe(ctx context.Context, e *env) ([]Result, error) {
	n := e.scaled(sagaSteps)
	k := min(sagaInstances, n)
	defer e.sagaCleanup(ctx)
	defer e.dropStream(context.WithoutCancel(ctx), probeAtomicStream)
	run := func(v probeVariant, n int) (r sagaRound, err error) {
		pprof.Do(ctx, pprof.Labels("side", "probe-"+v.name), func(ctx context.Context) {
			r, err = e.sagaProbeRound(ctx, v, n, k)
		})
		if err != nil {
			err = fmt.Errorf("%s: %w", v.name, err)
		}
		return r, err
	}
	an, ak := e.probeSize(probeVariant{atomic: true}, n, k)
	e.progress("  %d steps on %d instances per round and variant (atomic ones: %d on %d), concurrency %d, batch %d", n, k, an, ak, sagaConc, probeBatch)
	for _, v := range probeVariants {
		if _, err := run(v, max(k, n/5)); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	res := make([]abResult, len(probeVariants))
	cpu := make([][]time.Duration, len(probeVariants))
	util := make([][]float64, len(probeVariants))
	conflicts := make([]int64, len(probeVariants))
	for r := range e.cfg.rounds {
		msg := fmt.Sprintf("  probe round %d:", r+1)
		for j := range probeVariants {
			i := (r + j) % len(probeVariants)
			sr, err := run(probeVariants[i], n)
			if err != nil {
				return nil, fmt.Errorf("round %d: %w", r+1, err)
			}
			steps, _ := e.probeSize(probeVariants[i], n, k)
			res[i].add(sr.stats, steps, e.cfg.rounds)
			cpu[i] = append(cpu[i], sr.cpu/time.Duration(steps))
			util[i] = append(util[i], sr.cpu.Seconds()/sr.stats.t.Seconds()/float64(runtime.GOMAXPROCS(0)))
			conflicts[i] += sr.conflicts
		}
		for i, v := range probeVariants {
			msg += fmt.Sprintf(" %s %s;", v.name, fmtRate(res[i].rates[r]))
		}
		e.progress("%s", msg)
	}
	msg := "  probe conflicts retried (all rounds):"
	for i, v := range probeVariants {
		msg += fmt.Sprintf(" %s %d;", v.name, conflicts[i])
	}
	e.progress("%s", msg)
	var out []Result
	for i, v := range probeVariants {
		r := rateResult("saga-probe", "probe "+v.name, res[i], res[0], 0)
		r.RawName = "raw today"
		r.RawDesc = "the P2 raw loop (Fetch(1), Get, Create/Update, schedule, Update, DoubleAck)"
		if c := medianDur(cpu[i]); c > 0 {
			r.Label += fmt.Sprintf(" (CPU/step %s, %.0f%% busy)", fmtDur(c), 100*median(util[i]))
		}
		out = append(out, r)
	}
	return out, nil
}

// probeAtomicStream holds records and schedules for the atomic variant.
const (
	probeAtomicStream = "RAWJS_A_saga"
	probeAtomicPrefix = "RAWJS.A.saga"
)

type probeCacheEntry struct {
	rec   []byte
	rev   uint64
	clear jetstream.PubAckFuture // the pending second put, if async
	key   string
	mu    sync.Mutex // held while clear is awaited
}

// probeSize returns the steps and instances of a round of variant v
// asked for n steps on k instances: on one server the atomic variants run
// about 20x slower than the rest, and a tenth of each suffices; replicated,
// they run at the others' pace, and on the same workload.
func (e *env) probeSize(v probeVariant, n, k int) (int, int) {
	if v.atomic && e.replicas() == 1 {
		return max(1, n/10), max(1, k/10)
	}
	return n, k
}

// sagaProbeRound is sagaRawRound with variant v's changes.
func (e *env) sagaProbeRound(ctx context.Context, v probeVariant, n, k int) (sagaRound, error) {
	n, k = e.probeSize(v, n, k)
	nc, err := e.servers.connect(nats.Name("jetsaga-bench-saga-probe"))
	if err != nil {
		return sagaRound{}, err
	}
	defer nc.Close()
	if v.atomic {
		e.dropStream(ctx, probeAtomicStream)
		// Direct gets stay on when replicated: the loads are direct gets,
		// as a KV Get is, and a stale one fails the guarded commit.
		if _, err := e.createStream(ctx, jetstream.StreamConfig{
			Name: probeAtomicStream, Subjects: []string{probeAtomicPrefix + ".>"},
			Storage: jetstream.FileStorage, Retention: jetstream.LimitsPolicy, Discard: jetstream.DiscardOld,
			MaxBytes: -1, MaxMsgs: -1, MaxMsgsPerSubject: 1, Duplicates: 10 * time.Minute, AllowDirect: true,
			AllowMsgSchedules: true, AllowMsgTTL: true, AllowAtomicPublish: true, AllowRollup: true,
		}); err != nil {
			return sagaRound{}, err
		}
	}
	r, err := e.setUpRawSaga(ctx, nc, n, k, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return sagaRound{}, err
	}
	js, cons, kv, sPrefix := r.js, r.cons, r.kv, r.sPrefix
	schedStream, queueStream := r.schedStream, r.queueStream

	var (
		count   atomic.Int64
		done    = make(chan struct{})
		fail    = newFirstErr()
		cacheMu sync.Mutex
		cache   = make(map[string]*probeCacheEntry)
	)
	p := &probeStep{v: v, js: js, kv: kv, sPrefix: sPrefix, cacheMu: &cacheMu, cache: cache}
	worker := func() error {
		for count.Load() < int64(n) && fail.get() == nil {
			b, err := cons.Fetch(v.batch, jetstream.FetchMaxWait(200*time.Millisecond))
			if err != nil {
				return err
			}
			for m := range b.Messages() {
				if err := p.step(ctx, m); err != nil {
					return err
				}
				if count.Add(1) == int64(n) {
					close(done)
				}
			}
			if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
		}
		return nil
	}
	st, cpu, err := e.timedWorkers(ctx, worker, done, fail)
	if err != nil {
		return sagaRound{}, err
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(10 * time.Second):
		return sagaRound{}, errors.New("async publishes not acknowledged within 10s")
	}
	if v.atomic {
		// n schedules and k records in the one stream; the queue empty.
		as, err := e.js.Stream(ctx, probeAtomicStream)
		if err != nil {
			return sagaRound{}, err
		}
		info, err := as.Info(ctx, jetstream.WithSubjectFilter(probeAtomicPrefix+".>"))
		if err != nil {
			return sagaRound{}, err
		}
		var scheds, recs uint64
		for subj, c := range info.State.Subjects {
			switch {
			case strings.HasPrefix(subj, probeAtomicPrefix+".s."):
				scheds += c
			case strings.HasPrefix(subj, probeAtomicPrefix+".r."):
				recs += c
			}
		}
		if scheds != uint64(n) || recs != uint64(k) {
			return sagaRound{}, fmt.Errorf("atomic stream holds %d schedules and %d records, want %d and %d", scheds, recs, n, k)
		}
		return sagaRound{stats: st, cpu: cpu, conflicts: p.conflicts.Load()}, nil
	}
	// Async acks may still be in flight: wait for the queue to empty.
	qs, err := e.js.Stream(ctx, queueStream)
	if err != nil {
		return sagaRound{}, err
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		info, err := qs.Info(ctx)
		if err != nil {
			return sagaRound{}, err
		}
		if info.State.Msgs == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	rec, err := e.checkSagaRound(ctx, n, k, schedStream, sPrefix+".s.*", queueStream, rawBucket)
	if err != nil {
		return sagaRound{}, err
	}
	return sagaRound{stats: st, cpu: cpu, recBytes: rec, conflicts: p.conflicts.Load()}, nil
}

type probeStep struct {
	v       probeVariant
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	sPrefix string
	cacheMu *sync.Mutex
	cache   map[string]*probeCacheEntry
	// conflicts counts commits refused for a stale revision (retried).
	conflicts atomic.Int64
}

func (p *probeStep) cached(key string) (*probeCacheEntry, error) {
	p.cacheMu.Lock()
	ce := p.cache[key]
	p.cacheMu.Unlock()
	if ce == nil {
		return nil, nil
	}
	ce.mu.Lock()
	defer ce.mu.Unlock()
	if ce.clear != nil {
		select {
		case ack := <-ce.clear.Ok():
			ce.rev = ack.Sequence
		case err := <-ce.clear.Err():
			ce.clear = nil
			if isKVConflict(err) {
				// Another step on the key wrote first: no cache.
				p.forget(ce.key)
				return nil, nil
			}
			return nil, err
		case <-time.After(5 * time.Second):
			return nil, errors.New("async clear not acknowledged")
		}
		ce.clear = nil
	}
	return &probeCacheEntry{key: ce.key, rec: ce.rec, rev: ce.rev}, nil
}

func (p *probeStep) remember(ce *probeCacheEntry) {
	p.cacheMu.Lock()
	p.cache[ce.key] = ce
	p.cacheMu.Unlock()
}

func (p *probeStep) forget(key string) {
	p.cacheMu.Lock()
	delete(p.cache, key)
	p.cacheMu.Unlock()
}

func (p *probeStep) load(ctx context.Context, key string) ([]byte, uint64, error) {
	if p.v.atomic {
		raw, err := p.js.Conn().RequestWithContext(ctx, "$JS.API.DIRECT.GET."+probeAtomicStream+"."+probeAtomicPrefix+".r."+key, nil)
		if err != nil {
			return nil, 0, err
		}
		if raw.Header.Get("Status") == "404" {
			return nil, 0, nil
		}
		seq, err := strconv.ParseUint(raw.Header.Get(jetstream.SequenceHeader), 10, 64)
		return raw.Data, seq, err
	}
	entry, err := p.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	return entry.Value(), entry.Revision(), nil
}

func (p *probeStep) step(ctx context.Context, m jetstream.Msg) error {
	md, err := m.Metadata()
	if err != nil {
		return err
	}
	var t tick
	if err := json.Unmarshal(m.Data(), &t); err != nil {
		return err
	}
	key := sagaName + "." + base64.RawURLEncoding.EncodeToString([]byte(t.Instance))
	identity := "seq:" + sagaQueue + ":" + strconv.FormatUint(md.Sequence.Stream, 10) + ":" + strconv.FormatInt(md.Timestamp.UnixNano(), 10)
	useCache := p.v.cache
	for {
		var raw []byte
		var rev uint64
		var ce *probeCacheEntry
		if useCache {
			if ce, err = p.cached(key); err != nil {
				return err
			}
		}
		if ce != nil {
			raw, rev = ce.rec, ce.rev
		} else if raw, rev, err = p.load(ctx, key); err != nil {
			return err
		}
		var rec record.Record
		if raw != nil {
			if err := json.Unmarshal(raw, &rec); err != nil {
				return err
			}
		}
		digest := record.InboxDigest(identity)
		if slices.Contains(rec.Inbox, digest) {
			return m.DoubleAck(ctx)
		}
		now := time.Now()
		if rev == 0 {
			rec.Started, rec.Originator = now, &record.Address{}
		}
		var data counter
		if len(rec.JSONData) > 0 {
			if err := json.Unmarshal(rec.JSONData, &data); err != nil {
				return err
			}
		}
		data.Count++
		if rec.JSONData, err = json.Marshal(&data); err != nil {
			return err
		}
		rec.Updated = now
		token := fmt.Sprintf("%s%010d", nuid.Next(), md.Sequence.Stream%1e10)
		at := now.Add(time.Hour)
		env := &record.Envelope{ID: token, Type: tickTimeout{}.MessageName(), Body: []byte("{}"), ContentType: contentType,
			Properties: map[string]string{propSaga: sagaName, propSagaID: t.Instance, propToken: token}}
		if rec.Timeouts == nil {
			rec.Timeouts = make(map[string]record.Timeout)
		}
		if rec.Inbox = append(rec.Inbox, digest); len(rec.Inbox) > 128 {
			rec.Inbox = rec.Inbox[len(rec.Inbox)-128:]
		}
		if p.v.atomic {
			// The schedule's subject is known before the commit, so its
			// ref goes into the record at once: no outbox.
			schedSubj := probeAtomicPrefix + ".s." + nuid.Next()
			rec.Timeouts[token] = record.Timeout{Type: env.Type, At: at, Ref: timeout.Ref("queue:" + schedSubj)}
			b, err := json.Marshal(&rec)
			if err != nil {
				return err
			}
			sched := rawTimeoutMsg(probeAtomicPrefix, env, at)
			sched.Subject = schedSubj
			sched.Header.Del(jetstream.MsgIDHeader)
			newRev, err := p.commitAtomic(ctx, key, b, rev, sched)
			if isKVConflict(err) {
				p.conflicts.Add(1)
				p.forget(key)
				useCache = false
				continue
			}
			if err != nil {
				return err
			}
			if p.v.cache {
				p.remember(&probeCacheEntry{key: key, rec: b, rev: newRev})
			}
			return p.ack(ctx, m)
		}
		rec.Timeouts[token] = record.Timeout{Type: env.Type, At: at}
		rec.Outbox = []record.Effect{{Kind: "schedule", Queue: sagaQueue, Msg: env, At: at, Token: token}}
		b, err := json.Marshal(&rec)
		if err != nil {
			return err
		}
		if rev == 0 {
			rev, err = p.kv.Create(ctx, key, b)
		} else {
			rev, err = p.kv.Update(ctx, key, b, rev)
		}
		if isKVConflict(err) {
			p.conflicts.Add(1)
			p.forget(key)
			useCache = false
			continue
		}
		if err != nil {
			return err
		}
		ack, err := p.js.PublishMsg(ctx, rawTimeoutMsg(p.sPrefix, env, at))
		if err != nil {
			return err
		}
		rec.Timeouts[token] = record.Timeout{Type: env.Type, At: at,
			Ref: timeout.Ref("queue:" + sagaQueue + ":" + strconv.FormatUint(ack.Sequence|transport.ScheduledBit, 10))}
		rec.Outbox = nil
		if b, err = json.Marshal(&rec); err != nil {
			return err
		}
		ce = &probeCacheEntry{key: key, rec: b, rev: rev}
		switch {
		case p.v.noClear:
		case p.v.clearAsync:
			f, err := p.js.PublishMsgAsync(&nats.Msg{Subject: "$KV." + rawBucket + "." + key, Data: b},
				jetstream.WithExpectLastSequencePerSubject(rev))
			if err != nil {
				return err
			}
			ce.clear = f
		default:
			if ce.rev, err = p.kv.Update(ctx, key, b, rev); err != nil && !isKVConflict(err) {
				return err
			}
		}
		if p.v.cache {
			p.remember(ce)
		}
		return p.ack(ctx, m)
	}
}

func (p *probeStep) ack(ctx context.Context, m jetstream.Msg) error {
	if p.v.ackAsync {
		return m.Ack()
	}
	return m.DoubleAck(ctx)
}

// commitAtomic writes the record (guarded by its subject's last sequence)
// and the schedule as one atomic batch and returns the record's new
// sequence.
func (p *probeStep) commitAtomic(ctx context.Context, key string, rec []byte, rev uint64, sched *nats.Msg) (uint64, error) {
	id := nuid.Next()
	r := &nats.Msg{Subject: probeAtomicPrefix + ".r." + key, Data: rec, Header: nats.Header{
		"Nats-Batch-Id":                     {id},
		"Nats-Batch-Sequence":               {"1"},
		jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(rev, 10)},
	}}
	if err := p.js.Conn().PublishMsg(r); err != nil {
		return 0, err
	}
	sched.Header.Set("Nats-Batch-Id", id)
	sched.Header.Set("Nats-Batch-Sequence", "2")
	sched.Header.Set("Nats-Batch-Commit", "1")
	resp, err := p.js.Conn().RequestMsgWithContext(ctx, sched)
	if err != nil {
		return 0, err
	}
	var ack struct {
		Seq   uint64              `json:"seq"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return 0, err
	}
	if ack.Error != nil {
		return 0, ack.Error
	}
	return ack.Seq - 1, nil // the record is the batch's first message
}

// The probe is opt-in (-only saga-probe): registered here, in its own
// file, so that the bench list in main.go stays as it is.
func init() {
	optInBenches = append(optInBenches, bench{"saga-probe",
		"raw loops of the P2 workload, one candidate saving at a time (fetch batches, record cache, async ack, async clear, atomic batch)",
		benchSagaProbe})
	optInBenches = append(optInBenches, bench{"saga-cache",
		"the dispatcher with its record cache, without it (every step loads), receiving one message at a time, and as three dispatchers taking turns, beside the P2 raw loop",
		benchSagaCache})
}

// benchSagaCache measures what the dispatcher's record cache and receive
// batches are worth, and what a step costs when the cache misses: a load,
// and carrying out again the timeout the previous step left in the
// record's outbox (on the transport engine a duplicate schedule: a
// refused guarded publish and a read of the pending schedule).
func benchSagaCache(ctx context.Context, e *env) ([]Result, error) {
	n := e.scaled(sagaSteps)
	k := min(sagaInstances, n)
	def := counterSaga()
	defer e.sagaCleanup(ctx)
	sides := []sagaSide{
		{"raw", e.sagaRawRound},
		{"jetsaga", func(ctx context.Context, n, k int) (sagaRound, error) { return e.sagaJetRound(ctx, def, n, k) }},
		{"jetsaga-nocache", func(ctx context.Context, n, k int) (sagaRound, error) {
			return e.sagaJetRound(ctx, def, n, k, saga.WithRecordCache(0))
		}},
		{"jetsaga-batch1", func(ctx context.Context, n, k int) (sagaRound, error) {
			return e.sagaJetRound(ctx, def, n, k, saga.WithReceiveBatch(1))
		}},
		{"jetsaga-x3", func(ctx context.Context, n, k int) (sagaRound, error) {
			return e.sagaJetRoundN(ctx, def, n, k, 3)
		}},
	}
	for _, s := range sides {
		if _, err := s.round(ctx, max(k, n/5), k); err != nil {
			return nil, fmt.Errorf("warm-up: %s: %w", s.label, err)
		}
	}
	res := make([]abResult, len(sides))
	cpu := make([][]time.Duration, len(sides))
	for r := range e.cfg.rounds {
		msg := fmt.Sprintf("  round %d:", r+1)
		for j := range sides {
			i := (r + j) % len(sides)
			var sr sagaRound
			var err error
			pprof.Do(ctx, pprof.Labels("side", sides[i].label), func(ctx context.Context) { sr, err = sides[i].round(ctx, n, k) })
			if err != nil {
				return nil, fmt.Errorf("round %d: %s: %w", r+1, sides[i].label, err)
			}
			res[i].add(sr.stats, n, e.cfg.rounds)
			cpu[i] = append(cpu[i], sr.cpu/time.Duration(n))
		}
		for i, s := range sides {
			msg += fmt.Sprintf(" %s %s;", s.label, fmtRate(res[i].rates[r]))
		}
		e.progress("%s", msg)
	}
	var out []Result
	for i, s := range sides[1:] {
		r := rateResult("saga-cache", fmt.Sprintf("%s (CPU/step %s)", s.label, fmtDur(medianDur(cpu[i+1]))), res[i+1], res[0], 0)
		r.RawName = "raw loop"
		r.RawDesc = fmt.Sprintf("the P2 raw loop of the first design's calls (CPU/step %s)", fmtDur(medianDur(cpu[0])))
		out = append(out, r)
	}
	return out, nil
}
