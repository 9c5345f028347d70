package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Schedule shards (issue #25, item 3): does activation run in parallel
// when a partition has several schedule streams, all sourced into its one
// queue stream? Opt-in (-only shards): each side is a child process of
// the million bench (millionRun: the same burst, RSS, cancels, checks),
// one after the other, and every figure is read as a ratio to side (a) of
// the same round.
//
//	(a) raw        one schedule stream, a plain pull consumer on its
//	               activations: the million bench's raw side;
//	(b) streamsK   K such streams, each with its own consumer: what K
//	               schedulers do with no queue stream behind them;
//	(c) shardsK    K schedule streams configured as the transport's, each
//	               sourced into ONE work-queue stream configured as the
//	               transport's queue stream, a plain pull consumer on it:
//	               the layout the transport would adopt, in raw nats.go.
//	               shards1 is the transport's present layout in raw nats.go;
//	(d) jetsaga    Queue.Schedule on -million-partitions partitions, as the
//	               million bench's jetsaga side.
//
// Each round runs every side once, in the opposite order to the round
// before, so that a drift in the machine's load favours no side.

// shardSeqShift is where (c) and (b) put the shard of a schedule in the
// number they return, the way the transport would: the low 40 bits are
// the schedule stream's own sequence number, bits 40–46 the shard (below
// the transport's ScheduledBit, 47, and its partition bits, 48–63).
const (
	shardSeqShift = 40
	shardSeqMask  = 1<<shardSeqShift - 1
	maxShards     = 1 << (47 - shardSeqShift)
)

// shardSides lists the sides of the shards bench for shard counts ks, in
// the order of the first round.
func shardSides(ks []int) []string {
	sides := []string{"raw"}
	for _, k := range ks {
		sides = append(sides, "streams"+strconv.Itoa(k))
	}
	sides = append(sides, "shards1")
	for _, k := range ks {
		if k != 1 {
			sides = append(sides, "shards"+strconv.Itoa(k))
		}
	}
	return append(sides, "jetsaga")
}

// shardSideDesc says what a side of the shards bench is.
func shardSideDesc(side string) string {
	switch {
	case side == "raw":
		return "(a) raw: 1 schedule stream, plain consumer"
	case side == "jetsaga":
		return "(d) jetsaga: Queue.Schedule, Receive+Complete"
	case strings.HasPrefix(side, "streams"):
		return "(b) raw: " + strings.TrimPrefix(side, "streams") + " schedule streams, a plain consumer each"
	case side == "shards1":
		return "(c) 1 schedule stream sourced into a queue stream (today's layout, raw)"
	case strings.HasPrefix(side, "shards"):
		return "(c) " + strings.TrimPrefix(side, "shards") + " schedule streams sourced into 1 queue stream"
	}
	return side
}

func benchShards(ctx context.Context, e *env) ([]Result, error) {
	sides := shardSides(e.cfg.shardCounts)
	if len(e.cfg.shardSides) > 0 {
		sides = slices.DeleteFunc(sides, func(s string) bool { return s != "raw" && !slices.Contains(e.cfg.shardSides, s) })
	}
	e.progress("  sides: %s; %d round(s), %d due within %v", strings.Join(sides, ", "), e.cfg.shardRounds, e.scaled(millionCount), e.cfg.spread)
	reports := make(map[string][]*millionReport) // by side, one per round
	start := time.Now()
	for round := range e.cfg.shardRounds {
		order := slices.Clone(sides)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, side := range order {
			e.progress("  round %d: %s — load average %s", round+1, side, loadAverage())
			r, err := runMillionChild(ctx, e, side)
			if err != nil {
				if ctx.Err() != nil {
					return nil, fmt.Errorf("%s: %w", side, err)
				}
				// One side failing (a child that timed out on a loaded
				// machine) leaves the other sides' figures of the round.
				e.progress("  round %d: %s failed: %v", round+1, side, err)
				r = nil
			}
			reports[side] = append(reports[side], r)
		}
	}
	e.progress("  shards bench done in %v; load average %s", time.Since(start).Round(time.Second), loadAverage())
	printShards(os.Stdout, e, sides, reports)
	return shardResults(e, sides, reports), nil
}

// shardRatios returns side's per-round ratios of figure f to raw's.
func shardRatios(reports map[string][]*millionReport, side string, f func(*millionReport) float64) []float64 {
	var out []float64
	for i, r := range reports[side] {
		if raw := reports["raw"][i]; r != nil && raw != nil && f(raw) > 0 {
			out = append(out, f(r)/f(raw))
		}
	}
	return out
}

var shardFigures = []struct {
	name string
	f    func(*millionReport) float64
	cell func(*millionReport) string
}{
	{"last received from first due", func(r *millionReport) float64 { return float64(r.Drain) }, func(r *millionReport) string { return fmtDur(r.Drain) }},
	{"burst CPU", func(r *millionReport) float64 { return float64(r.BurstCPU) }, func(r *millionReport) string { return fmtDur(r.BurstCPU) }},
	{"peak RSS", func(r *millionReport) float64 { return float64(r.RSSPeak) }, func(r *millionReport) string { return fmt.Sprintf("%d MiB", r.RSSPeak>>20) }},
	{"RSS all pending", func(r *millionReport) float64 { return float64(r.RSSSched) }, func(r *millionReport) string { return fmt.Sprintf("%d MiB", r.RSSSched>>20) }},
	{"enqueued-due p99", func(r *millionReport) float64 { return float64(r.EnqLate.P99) }, func(r *millionReport) string { return fmtDur(r.EnqLate.P99) }},
}

// shardOK reports whether every message of r arrived once, none early and
// no cancelled one.
func shardOK(r *millionReport) bool {
	return r.Got == r.N-r.Cancelled && r.Dups == 0 && r.Early == 0 && r.Resurrected == 0
}

// printShards prints one table per round (figure and ratio to (a)) and,
// with several rounds, the median ratios.
func printShards(w *os.File, e *env, sides []string, reports map[string][]*millionReport) {
	fmt.Fprintf(w, "shards: %d due within %v, %d cancelled; ratios to (a) of the same round\n", e.scaled(millionCount), e.cfg.spread, min(2*cancelCount, e.scaled(millionCount)/2))
	for round := range e.cfg.shardRounds {
		fmt.Fprintf(w, "round %d\n", round+1)
		rows := [][]string{{"side"}}
		for _, f := range shardFigures {
			rows[0] = append(rows[0], f.name)
		}
		rows[0] = append(rows[0], "counts")
		for _, side := range sides {
			r, raw := reports[side][round], reports["raw"][round]
			row := []string{fmt.Sprintf("%-9s %s", side, shardSideDesc(side))}
			if r == nil {
				rows = append(rows, append(row, "failed (see its output above)"))
				continue
			}
			for _, f := range shardFigures {
				cell := f.cell(r)
				if side != "raw" && raw != nil && f.f(raw) > 0 {
					cell += fmt.Sprintf(" (%.2fx)", f.f(r)/f.f(raw))
				}
				row = append(row, cell)
			}
			row = append(row, millionCounts(r))
			rows = append(rows, row)
		}
		printRows(w, rows)
	}
	if e.cfg.shardRounds > 1 {
		fmt.Fprintf(w, "median of the per-round ratios to (a)\n")
		rows := [][]string{{"side"}}
		for _, f := range shardFigures {
			rows[0] = append(rows[0], f.name)
		}
		for _, side := range sides[1:] {
			row := []string{side}
			for _, f := range shardFigures {
				rs := shardRatios(reports, side, f.f)
				row = append(row, fmt.Sprintf("%.2fx %s", median(rs), fmtRatios(rs)))
			}
			rows = append(rows, row)
		}
		printRows(w, rows)
	}
	fmt.Fprintln(w)
}

func fmtRatios(rs []float64) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%.2f", r)
	}
	return "(" + strings.Join(parts, " ") + ")"
}

// printRows prints rows as columns two spaces apart.
func printRows(w *os.File, rows [][]string) {
	width := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, c := range row {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		for i, c := range row {
			b.WriteString(c)
			if i < len(row)-1 {
				b.WriteString(strings.Repeat(" ", width[i]-len([]rune(c))+2))
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

// shardResults are the bench's results for the main table and -json: for
// each side but (a), the drain with the target P7 holds jetsaga to, and
// the peak RSS with P4's.
func shardResults(e *env, sides []string, reports map[string][]*millionReport) []Result {
	var out []Result
	for _, side := range sides[1:] {
		// The figures of the last round in which both sides ran.
		last := len(reports[side]) - 1
		for last >= 0 && (reports[side][last] == nil || reports["raw"][last] == nil) {
			last--
		}
		if last < 0 {
			out = append(out, Result{Bench: "shards", Label: "shards " + side, Jetsaga: Figure{Text: "failed in every round"}, Pass: verdict(false)})
			continue
		}
		r, raw := reports[side][last], reports["raw"][last]
		drain := shardRatios(reports, side, shardFigures[0].f)
		peak := shardRatios(reports, side, shardFigures[2].f)
		ok := true
		for _, r := range reports[side] {
			ok = ok && r != nil && shardOK(r)
		}
		out = append(out,
			Result{
				Bench: "shards", Label: fmt.Sprintf("shards %s: last received from the first due (%v window)", side, e.cfg.spread),
				Jetsaga: Figure{Text: fmt.Sprintf("%s, CPU %s; %s", fmtDur(r.Drain), fmtDur(r.BurstCPU), millionCounts(r))},
				Raw:     &Figure{Text: fmt.Sprintf("%s, CPU %s", fmtDur(raw.Drain), fmtDur(raw.BurstCPU))},
				RawDesc: shardSideDesc("raw"), RoundRatios: drain, Ratio: median(drain),
				Target: "<= 1.25x (a) (P7)", Pass: verdict(median(drain) <= 1.25 && ok),
			},
			Result{
				Bench: "shards", Label: fmt.Sprintf("shards %s: peak RSS", side),
				Jetsaga:     Figure{Text: fmt.Sprintf("%d MiB (%d MiB all pending)", r.RSSPeak>>20, r.RSSSched>>20)},
				Raw:         &Figure{Text: fmt.Sprintf("%d MiB (%d MiB all pending)", raw.RSSPeak>>20, raw.RSSSched>>20)},
				RoundRatios: peak, Ratio: median(peak),
				Target: "<= 1.5x (a) (P4)", Pass: verdict(median(peak) <= 1.5),
			})
	}
	return out
}

// loadAverage returns /proc/loadavg's three load averages, or "?".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// parseShardCounts parses -shards: shard counts from 1 to maxShards.
func parseShardCounts(s string) ([]int, error) {
	var ks []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		k, err := strconv.Atoi(f)
		if err != nil || k < 1 || k > maxShards {
			return nil, fmt.Errorf("-shards %q: each count must be 1-%d", s, maxShards)
		}
		if !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	if len(ks) == 0 {
		return nil, fmt.Errorf("-shards %q: no shard count", s)
	}
	return ks, nil
}

// newShardSide makes side (b) streamsK or (c) shardsK for a child.
func newShardSide(ctx context.Context, nc *nats.Conn, side string) (millionSide, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	for _, kind := range []string{"streams", "shards"} {
		rest, ok := strings.CutPrefix(side, kind)
		if !ok {
			continue
		}
		k, err := strconv.Atoi(rest)
		if err != nil || k < 1 || k > maxShards {
			return nil, fmt.Errorf("side %q: shard count must be 1-%d", side, maxShards)
		}
		if kind == "streams" {
			return newStreamsMillion(ctx, js, k)
		}
		return newShardsMillion(ctx, js, k)
	}
	return nil, fmt.Errorf("unknown side %q", side)
}

// shardOf picks the shard of a MessageID: FNV-1a 64 modulo k, as the
// transport picks a partition (with several partitions the transport
// would use other bits of the hash, e.g. h / partitions % k).
func shardOf(id string, k int) int {
	if k == 1 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	return int(h.Sum64() % uint64(k))
}

func shardSeq(shard int, seq uint64) uint64 { return uint64(shard)<<shardSeqShift | seq&shardSeqMask }

func splitShardSeq(seq uint64) (int, uint64) { return int(seq >> shardSeqShift), seq & shardSeqMask }

// streamsMillion is side (b): K schedule streams like raw's, schedules
// spread over them by MessageID, a plain pull consumer on each.
type streamsMillion struct {
	js      jetstream.JetStream
	streams []jetstream.Stream
	prefix  []string
}

// shardNames names shard j of queue: the transport's names with kind S
// for shard 0 (today's schedule stream) and S<j> for shard j, so that a
// stream name never reads as another queue's or partition's.
func shardNames(queue string, j int) (stream, prefix string) {
	kind := "S"
	if j > 0 {
		kind += strconv.Itoa(j)
	}
	return rawNames(kind, queue)
}

func newStreamsMillion(ctx context.Context, js jetstream.JetStream, k int) (*streamsMillion, error) {
	s := &streamsMillion{js: js}
	e := &env{js: js}
	for j := range k {
		name, prefix := shardNames("million", j)
		st, err := e.rawScheduleStream(ctx, name, prefix)
		if err != nil {
			return nil, err
		}
		s.streams, s.prefix = append(s.streams, st), append(s.prefix, prefix)
	}
	return s, nil
}

func (s *streamsMillion) pilot(ctx context.Context, n int) error {
	e := &env{js: s.js}
	var prefixes []string
	for j := range s.streams {
		name, prefix := shardNames("pilot", j)
		if _, err := e.rawScheduleStream(ctx, name, prefix); err != nil {
			return err
		}
		defer s.js.DeleteStream(context.WithoutCancel(ctx), name)
		prefixes = append(prefixes, prefix)
	}
	due := time.Now().Add(time.Hour)
	return parallel(millionSchedConc, n, func(i int) error {
		id := strconv.Itoa(i)
		_, err := s.js.PublishMsg(ctx, rawScheduleMsg(prefixes[shardOf(id, len(prefixes))], id, due))
		return err
	})
}

func (s *streamsMillion) schedule(ctx context.Context, id string, due time.Time) (uint64, error) {
	j := shardOf(id, len(s.streams))
	ack, err := s.js.PublishMsg(ctx, rawScheduleMsg(s.prefix[j], id, due))
	if err != nil {
		return 0, err
	}
	return shardSeq(j, ack.Sequence), nil
}

func (s *streamsMillion) cancel(ctx context.Context, seq uint64) error {
	j, local := splitShardSeq(seq)
	if j >= len(s.streams) {
		return fmt.Errorf("seq %d: no shard %d", seq, j)
	}
	return rawGuardedCancel(ctx, s.js, s.streams[j], s.prefix[j], local)
}

func (s *streamsMillion) receive(ctx context.Context, got func(string, time.Time) error) error {
	errc := make(chan error, len(s.streams))
	var wg sync.WaitGroup
	for j, st := range s.streams {
		c, err := st.CreateOrUpdateConsumer(ctx, recvConsumer(s.prefix[j]+".f.m"))
		if err != nil {
			return err
		}
		wg.Go(func() { errc <- consumeAll(ctx, c, got) })
	}
	wg.Wait()
	close(errc)
	var errs []error
	for err := range errc {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (s *streamsMillion) close() {}

// consumeAll is raw's receiver: a plain pull consumer (Messages, Ack)
// handing each message's MessageID and stream timestamp to got, until ctx
// ends (then it returns nil).
func consumeAll(ctx context.Context, c jetstream.Consumer, got func(string, time.Time) error) error {
	it, err := c.Messages(jetstream.PullMaxMessages(1000))
	if err != nil {
		return err
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		if err := got(m.Headers().Get(hdrMessageID), md.Timestamp); err != nil {
			return err
		}
		if err := m.Ack(); err != nil {
			return err
		}
	}
}

// shardsMillion is side (c): K schedule streams configured as the
// transport's (jetstream_provision.go, provision), each sourced into one
// work-queue stream configured as the transport's queue stream, with the
// transport's subjects (P.S<j>.N.p.<key>.s, activated into
// P.S<j>.N.p.<key>.f.m, sourced as P.Q.N.p.m), duplicate guard and guarded
// cancel; a plain pull consumer (Messages, Ack) on the queue stream. The
// transport's housekeeping purges sourced copies without a MessageID
// every 5 s and those with one after the duplicate window (10 min): every
// copy here has a MessageID and the bench is shorter, so it purges none,
// as the transport would not.
type shardsMillion struct {
	js      jetstream.JetStream
	streams []jetstream.Stream
	prefix  []string
	queue   jetstream.Stream
	qPrefix string
}

func newShardsMillion(ctx context.Context, js jetstream.JetStream, k int) (*shardsMillion, error) {
	s := &shardsMillion{js: js}
	var err error
	if s.streams, s.prefix, err = shardStreams(ctx, js, "million", k); err != nil {
		return nil, err
	}
	qName, qPrefix := rawNames("Q", "million")
	e := &env{js: js}
	e.dropStream(ctx, qName)
	cfg := e.workQueueConfig(qName, qPrefix)
	cfg.Subjects = nil // as the transport's: what it holds comes through its sources
	for j := range k {
		name, _ := shardNames("million", j)
		cfg.Sources = append(cfg.Sources, &jetstream.StreamSource{
			Name: name,
			SubjectTransforms: []jetstream.SubjectTransformConfig{
				{Source: s.prefix[j] + ".*.f.m", Destination: qPrefix + ".m"},
				{Source: s.prefix[j] + ".*.g.m", Destination: qPrefix + ".m"},
			},
		})
	}
	if s.queue, err = e.createStream(ctx, cfg); err != nil {
		return nil, err
	}
	s.qPrefix = qPrefix
	return s, nil
}

// shardStreams creates k schedule streams for queue, configured as the
// transport's: limits retention, schedules and TTLs allowed, no limits,
// on exactly the subjects of a queue without sessions.
func shardStreams(ctx context.Context, js jetstream.JetStream, queue string, k int) ([]jetstream.Stream, []string, error) {
	e := &env{js: js}
	var streams []jetstream.Stream
	var prefixes []string
	for j := range k {
		name, prefix := shardNames(queue, j)
		e.dropStream(ctx, name)
		st, err := e.createStream(ctx, jetstream.StreamConfig{
			Name: name,
			Subjects: []string{
				prefix + ".*.f.m", prefix + ".*.g.m", prefix + ".*.s", prefix + ".*.x.*",
			},
			Storage:           jetstream.FileStorage,
			Retention:         jetstream.LimitsPolicy,
			Discard:           jetstream.DiscardOld,
			MaxBytes:          -1,
			MaxMsgs:           -1,
			Duplicates:        10 * time.Minute,
			AllowDirect:       true,
			AllowMsgSchedules: true,
			AllowMsgTTL:       true,
		})
		if err != nil {
			return nil, nil, err
		}
		streams, prefixes = append(streams, st), append(prefixes, prefix)
	}
	return streams, prefixes, nil
}

// idKey is the transport's key(MessageID) (docs/wire.md): "_" and the
// base64url of the first 16 bytes of the ID's SHA-256.
func idKey(id string) string {
	h := sha256.Sum256([]byte(id))
	return "_" + base64.RawURLEncoding.EncodeToString(h[:16])
}

// shardScheduleMsg is the message Queue.Schedule publishes for
// jetMessage(id) due at `at` on the schedule stream with subject prefix
// prefix: the transport's subjects, its headers and its duplicate guard
// (no Nats-Msg-Id: the guard is the transport's dedup).
func shardScheduleMsg(prefix, id string, at time.Time) *nats.Msg {
	due := at.UTC().Format(time.RFC3339Nano)
	key := idKey(id)
	return &nats.Msg{Subject: prefix + "." + key + ".s", Data: body, Header: nats.Header{
		hdrMessageID:                        {id},
		hdrContentType:                      {contentType},
		hdrScheduledAt:                      {due},
		"Nats-Schedule":                     {"@at " + due},
		"Nats-Schedule-Target":              {prefix + "." + key + ".f.m"},
		jetstream.ExpectedLastSubjSeqHeader: {"0"},
		"Nats-Expected-Last-Subject-Sequence-Subject": {prefix + "." + key + ".>"},
	}}
}

func (s *shardsMillion) pilot(ctx context.Context, n int) error {
	streams, prefixes, err := shardStreams(ctx, s.js, "pilot", len(s.streams))
	if err != nil {
		return err
	}
	for _, st := range streams {
		defer s.js.DeleteStream(context.WithoutCancel(ctx), st.CachedInfo().Config.Name)
	}
	base, due := nuid.Next(), time.Now().Add(time.Hour)
	return parallel(millionSchedConc, n, func(i int) error {
		id := base + "-" + strconv.Itoa(i)
		_, err := s.js.PublishMsg(ctx, shardScheduleMsg(prefixes[shardOf(id, len(prefixes))], id, due))
		return err
	})
}

func (s *shardsMillion) schedule(ctx context.Context, id string, due time.Time) (uint64, error) {
	j := shardOf(id, len(s.streams))
	ack, err := s.js.PublishMsg(ctx, shardScheduleMsg(s.prefix[j], id, due))
	if err != nil {
		return 0, err
	}
	return shardSeq(j, ack.Sequence), nil
}

// cancel is the transport's guarded cancel on the schedule's shard, which
// the number's shard bits name: read the schedule, then write a cancel
// record that purges it, accepted only while the schedule is stored.
func (s *shardsMillion) cancel(ctx context.Context, seq uint64) error {
	j, local := splitShardSeq(seq)
	if j >= len(s.streams) {
		return fmt.Errorf("seq %d: no shard %d", seq, j)
	}
	raw, err := s.streams[j].GetMsg(ctx, local)
	if err != nil {
		return err
	}
	rest, ok := strings.CutPrefix(raw.Subject, s.prefix[j]+".")
	key, kind, _ := strings.Cut(rest, ".")
	if !ok || kind != "s" {
		return fmt.Errorf("seq %d: %s is not a schedule", seq, raw.Subject)
	}
	rec := &nats.Msg{Subject: s.prefix[j] + "." + key + ".x." + strconv.FormatUint(local, 10), Header: nats.Header{
		hdrCancelled:         {"1"},
		"Nats-Schedule-Next": {"purge"},
		"Nats-Scheduler":     {raw.Subject},
		"Nats-TTL":           {"604800s"},
	}}
	_, err = s.js.PublishMsg(ctx, rec, jetstream.WithExpectLastSequenceForSubject(local, raw.Subject))
	return err
}

func (s *shardsMillion) receive(ctx context.Context, got func(string, time.Time) error) error {
	c, err := s.queue.CreateOrUpdateConsumer(ctx, recvConsumer(s.qPrefix+".m"))
	if err != nil {
		return err
	}
	return consumeAll(ctx, c, got)
}

func (s *shardsMillion) close() {}
