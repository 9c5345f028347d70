package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/transport/internal/lookup"
)

func (d *jsDriver) openQueue(ctx context.Context, cfg QueueConfig) (queueDriver, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	if _, err := openStep(ctx, d, "queue "+cfg.Name, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, d.checkExisting(ctx, cfg)
	}); err != nil {
		return nil, err
	}
	return d.newQueue(ctx, cfg, d.provision)
}

// attachQueue opens an existing queue with the config it was provisioned
// with, which its streams keep in their metadata.
func (d *jsDriver) attachQueue(ctx context.Context, name string) (queueDriver, QueueConfig, error) {
	if err := d.check(); err != nil {
		return nil, QueueConfig{}, err
	}
	s, err := openStep(ctx, d, "queue "+name, func(ctx context.Context) (jetstream.Stream, error) {
		return d.js.Stream(ctx, d.names(name, 0).queue)
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, QueueConfig{}, fmt.Errorf("%w: %s", ErrQueueNotFound, name)
	}
	if err != nil {
		return nil, QueueConfig{}, d.mapErr(err)
	}
	var cfg QueueConfig
	if err := json.Unmarshal([]byte(s.CachedInfo().Config.Metadata[MetaConfig]), &cfg); err != nil || cfg.Name != name {
		return nil, QueueConfig{}, fmt.Errorf("%w: stream %s has no jetsaga config; open it with OpenQueue", ErrInvalidConfig, s.CachedInfo().Config.Name)
	}
	q, err := d.newQueue(ctx, cfg, d.lookup)
	return q, cfg, err
}

// newQueue assembles a queue from its partitions and dead-letter queue,
// each made (provisioned or looked up) by part, each a step of its own
// (see openStep): a queue of many partitions on a busy cluster takes
// longer than one partition's calls may.
func (d *jsDriver) newQueue(ctx context.Context, cfg QueueConfig, part func(context.Context, QueueConfig, jsNames, int) (*jsPartition, error)) (*jsQueue, error) {
	q := &jsQueue{d: d, cfg: cfg, sessions: make(map[string]jetstream.Consumer)}
	for p := range cfg.Partitions {
		pt, err := openStep(ctx, d, fmt.Sprintf("queue %s partition %d", cfg.Name, p), func(ctx context.Context) (*jsPartition, error) {
			return part(ctx, cfg, d.names(cfg.Name, p), p)
		})
		if err != nil {
			return nil, err
		}
		q.parts = append(q.parts, pt)
	}
	dl, err := openStep(ctx, d, "dead-letter queue of "+cfg.Name, func(ctx context.Context) (*jsPartition, error) {
		return part(ctx, cfg, d.deadLetterNames(cfg.Name), 0)
	})
	if err != nil {
		return nil, err
	}
	dlCfg := cfg
	dlCfg.Name += DeadLetterSuffix
	dlCfg.Partitions, dlCfg.RequiresSession = 1, false
	q.dlq = &jsQueue{d: d, cfg: dlCfg, parts: []*jsPartition{dl}, isDLQ: true}
	q.dlq.dlq = q.dlq
	d.hk.housekeep(q)
	return q, nil
}

// leaderReads turns direct gets off on a replicated stream, so that every
// read of its messages (Peek, Browse, Cancel's lookups, the session lock
// check) goes to the stream leader. A direct get may be served by any
// replica, and a follower can lag: it could show a message just removed,
// or miss a cancel record just written, which would make Cancel's answer
// wrong. Queues created with Replicas > 1 have no direct gets from the
// start; this also covers streams replicated by other means (a server
// policy, or a stream created by an older version).
func (d *jsDriver) leaderReads(ctx context.Context, s jetstream.Stream) (jetstream.Stream, error) {
	cfg := s.CachedInfo().Config
	if cfg.Replicas <= 1 || !cfg.AllowDirect {
		return s, nil
	}
	cfg.AllowDirect = false
	return d.js.UpdateStream(ctx, cfg)
}

// ensureStream creates the stream cfg describes, or updates it if it
// exists with another config, and makes its reads leader reads. An
// existing stream with the same config is not touched: reopening a queue
// sends no stream update. A stream update, even one that changes nothing,
// rewrites the stream's file store config under the store's lock, and
// nats-server (2.15) reads that config without the lock when it creates a
// consumer (fileStore.ConsumerStore): processes that open one queue, topic
// or subscription at once would race inside the server (the race detector
// reports it on an in-process server). The
// server answers a create with the existing stream when the configs are
// equal, and refuses it ("stream name already in use") otherwise; only
// then is the stream updated. On an existing replicated stream cfg asks
// for leader reads from the start (see leaderReads), so that reopening it
// neither counts as a change nor turns direct gets on for a moment.
//
// Each attempt has a time limit (streamAttempt, doubling): on a cluster,
// concurrent creates and updates of a stream whose leader is not elected
// yet can go unanswered (nats-server 2.15 answers only the last request
// of an assignment when the leader is elected), although they took
// effect. Every request here is idempotent, so ensureStream asks again,
// until ctx ends.
func (d *jsDriver) ensureStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	for limit := streamAttempt; ; limit *= 2 {
		actx, cancel := context.WithTimeout(ctx, limit)
		s, err := d.ensureStreamOnce(actx, cfg)
		cancel()
		if err == nil || ctx.Err() != nil || actx.Err() == nil {
			return s, err
		}
		d.o.logger.LogAttrs(ctx, slog.LevelDebug, "transport: stream create or update unanswered; asking again",
			slog.String("stream", cfg.Name), slog.Duration("after", limit))
	}
}

// streamAttempt is how long ensureStream's first attempt may take.
const streamAttempt = 2 * time.Second

func (d *jsDriver) ensureStreamOnce(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	for attempt := 0; ; attempt++ {
		old, err := d.js.Stream(ctx, cfg.Name)
		switch {
		case err == nil:
			if old.CachedInfo().Config.Replicas > 1 {
				cfg.AllowDirect = false
			}
		case !errors.Is(err, jetstream.ErrStreamNotFound):
			return nil, err
		}
		s, err := d.js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			if old == nil && attempt == 0 {
				continue // created meanwhile by another process: look at it
			}
			s, err = d.js.UpdateStream(ctx, cfg)
		}
		if err != nil {
			return nil, err
		}
		return d.leaderReads(ctx, s)
	}
}

// lookup finds the streams and consumer of an existing partition.
func (d *jsDriver) lookup(ctx context.Context, cfg QueueConfig, n jsNames, p int) (*jsPartition, error) {
	part := &jsPartition{idx: p, n: n}
	var err error
	if part.queue, err = d.js.Stream(ctx, n.queue); err == nil {
		part.queue, err = d.leaderReads(ctx, part.queue)
	}
	if err != nil {
		return nil, d.mapErr(err)
	}
	part.replicated = part.queue.CachedInfo().Config.Replicas > 1
	if n.hasSch {
		if part.sched, err = d.js.Stream(ctx, n.sched); err == nil {
			d.upgradeSchedule(part.sched, n)
			part.sched, err = d.leaderReads(ctx, part.sched)
		}
		if err != nil {
			return nil, d.mapErr(err)
		}
	}
	if (!cfg.RequiresSession || n.isDeadLetter) && !n.topic {
		if part.cons, err = part.queue.Consumer(ctx, ReceiveConsumer); err != nil {
			return nil, d.mapErr(err)
		}
	}
	d.keep(part)
	return part, nil
}

// upgradeSchedule brings the schedule stream s that an earlier version
// provisioned, whose cancel records were written on their stored subject
// P.S.N.p.<key>.x.<seq> (so that it stored a publish on
// P.S.N.p.<key>.x.<anything>), up to this version's subjects and subject
// transform (see cancelToken), as provision does. A stream that has them,
// or whose subjects are not an earlier version's, is left alone: attaching
// a queue sends no stream update (see ensureStream) but this one, once.
// The update runs in the background, within the API timeout: a process
// may lack the permission to update streams (a sender), whose request
// then goes unanswered, and the attach must not wait for that. Until the
// update lands the queue works on the old config (Cancel falls back to
// it); if it fails, it is logged, and the next process that opens or
// attaches the queue tries again.
func (d *jsDriver) upgradeSchedule(s jetstream.Stream, n jsNames) {
	cfg := s.CachedInfo().Config
	old := n.sSubj + ".*." + cancelToken + ".*"
	i := slices.Index(cfg.Subjects, old)
	if i < 0 || cfg.SubjectTransform != nil {
		return
	}
	cfg.Subjects = slices.Clone(cfg.Subjects)
	cfg.Subjects[i] = old + "." + cancelWriteToken
	cfg.SubjectTransform = n.cancelTransform()
	go func() {
		ctx, cancel := context.WithTimeout(d.life, d.o.apiTimeout)
		defer cancel()
		if _, err := d.js.UpdateStream(ctx, cfg); err != nil && d.check() == nil {
			d.o.logger.LogAttrs(ctx, slog.LevelWarn, "transport: schedule stream has an earlier version's subjects and could not be upgraded; a publish on a stray .x. subject is still stored until a process that may update streams opens or attaches the queue",
				slog.String("stream", cfg.Name), slogErr(err))
		}
	}()
}

// checkExisting refuses to reopen a queue with a different shape, and a
// queue whose streams were changed to limits that drop messages.
func (d *jsDriver) checkExisting(ctx context.Context, cfg QueueConfig) error {
	n := d.names(cfg.Name, 0)
	s, err := d.js.Stream(ctx, n.queue)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return d.mapErr(err)
	}
	md := s.CachedInfo().Config.Metadata
	if md[MetaPartitions] != strconv.Itoa(cfg.Partitions) {
		return fmt.Errorf("%w: queue %q has %s partitions, config asks for %d",
			ErrInvalidConfig, cfg.Name, md[MetaPartitions], cfg.Partitions)
	}
	if md[MetaRequiresSession] != strconv.FormatBool(cfg.RequiresSession) {
		return fmt.Errorf("%w: queue %q has RequiresSession=%s, config asks for %t",
			ErrInvalidConfig, cfg.Name, md[MetaRequiresSession], cfg.RequiresSession)
	}
	for p := range cfg.Partitions {
		for _, name := range []string{d.names(cfg.Name, p).sched, d.names(cfg.Name, p).queue} {
			s, err := d.js.Stream(ctx, name)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				continue
			}
			if err != nil {
				return d.mapErr(err)
			}
			if err := refuseLossyLimits(s.CachedInfo().Config); err != nil {
				return err
			}
		}
	}
	return nil
}

// refuseLossyLimits rejects stream settings under which JetStream deletes
// messages nobody received, pending schedules included, without telling
// anyone: an age limit, a message-count limit, a per-subject limit, or a
// byte limit that discards old messages.
func refuseLossyLimits(c jetstream.StreamConfig) error {
	bad := func(what string) error {
		return fmt.Errorf("%w: stream %s has %s, which would silently drop pending messages; remove it",
			ErrInvalidConfig, c.Name, what)
	}
	switch {
	case c.MaxAge > 0:
		return bad("MaxAge " + c.MaxAge.String())
	case c.MaxMsgs > 0:
		return bad("MaxMsgs")
	case c.MaxMsgsPerSubject > 0:
		return bad("MaxMsgsPerSubject")
	case c.MaxBytes > 0 && c.Discard != jetstream.DiscardNew:
		return bad("MaxBytes with DiscardOld")
	}
	return nil
}

func (d *jsDriver) provision(ctx context.Context, cfg QueueConfig, n jsNames, p int) (*jsPartition, error) {
	storage := jetstream.FileStorage
	if cfg.MemoryStorage {
		storage = jetstream.MemoryStorage
	}
	maxBytes := cfg.MaxBytes
	if maxBytes == 0 {
		maxBytes = -1
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	meta := map[string]string{
		MetaPartitions:      strconv.Itoa(cfg.Partitions),
		MetaRequiresSession: strconv.FormatBool(cfg.RequiresSession),
		MetaConfig:          string(cfgJSON),
	}
	maps.Copy(meta, n.meta)
	base := jetstream.StreamConfig{
		Storage:     storage,
		Replicas:    cfg.Replicas,
		Discard:     jetstream.DiscardNew,
		MaxBytes:    maxBytes,
		MaxMsgs:     -1,
		MaxAge:      0,
		Duplicates:  cfg.DuplicateWindow,
		AllowDirect: cfg.Replicas <= 1, // see leaderReads
		Metadata:    meta,
	}
	part := &jsPartition{idx: p, n: n}
	if n.hasSch {
		sc := base
		sc.Name = n.sched
		sc.Description = "jetsaga: scheduled messages of queue " + cfg.Name
		sc.Subjects = n.schedSubjects(cfg.RequiresSession)
		sc.SubjectTransform = n.cancelTransform()
		sc.Retention = jetstream.LimitsPolicy
		sc.AllowMsgSchedules = true
		sc.AllowMsgTTL = true
		// A state commit with schedules is one atomic batch (state.go).
		sc.AllowAtomicPublish = n.vSubj != ""
		// The server refuses DiscardNew on a schedule stream; with no limit
		// set, DiscardOld never discards anything either.
		sc.Discard, sc.MaxBytes = jetstream.DiscardOld, -1
		s, err := d.ensureStream(ctx, sc)
		if err != nil {
			return nil, d.mapErr(err)
		}
		part.sched = s
	}
	qc := base
	qc.Name = n.queue
	qc.Description = "jetsaga: queue " + cfg.Name
	// A queue or topic stream listens on no subject: what it holds comes
	// through the schedule stream, where duplicates are detected. A
	// dead-letter queue takes its copies on one subject.
	if n.isDeadLetter {
		qc.Subjects = []string{n.qSubj + ".m"}
	}
	qc.Retention = jetstream.WorkQueuePolicy
	if n.topic {
		qc.Retention = jetstream.InterestPolicy
		qc.Description = "jetsaga: topic " + cfg.Name
	}
	if n.hasSch {
		var trs []jetstream.SubjectTransformConfig
		for _, kind := range []string{KindWithID, KindWithoutID} {
			src, dst := transformTail(n.tokens, 2)
			srcS, dstS := transformTail(n.tokens, 3)
			trs = append(trs,
				jetstream.SubjectTransformConfig{Source: n.sSubj + ".*." + kind + ".m" + src, Destination: n.qSubj + ".m" + dst},
				jetstream.SubjectTransformConfig{Source: n.sSubj + ".*." + kind + ".s.*" + srcS, Destination: n.qSubj + ".s.{{wildcard(2)}}" + dstS})
		}
		qc.Sources = []*jetstream.StreamSource{{Name: n.sched, SubjectTransforms: trs}}
	}
	s, err := d.ensureStream(ctx, qc)
	if err != nil {
		return nil, d.mapErr(err)
	}
	part.queue = s
	part.replicated = s.CachedInfo().Config.Replicas > 1
	if (!cfg.RequiresSession || n.isDeadLetter) && !n.topic {
		c, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:       ReceiveConsumer,
			FilterSubject: n.qSubj + ".m",
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       serverAckWait(cfg.LockDuration),
			MaxDeliver:    maxDeliver(cfg, n),
			MaxAckPending: -1,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		if err != nil {
			return nil, d.mapErr(err)
		}
		part.cons = c
	}
	d.keep(part)
	return part, nil
}

func (d *jsDriver) deleteQueue(ctx context.Context, name string) error {
	d.hk.forget(name)
	return d.deleteStreams(ctx, func(p int) jsNames { return d.names(name, p) }, d.deadLetterNames(name).queue)
}

// deleteStreams deletes the streams of every partition that names gives,
// up to the first partition without a queue stream, and then the streams
// more. Missing streams are no error.
func (d *jsDriver) deleteStreams(ctx context.Context, names func(p int) jsNames, more ...string) error {
	if err := d.check(); err != nil {
		return err
	}
	ctx, cancel := d.apiContext(ctx)
	defer cancel()
	del := func(stream string) error {
		err := d.js.DeleteStream(ctx, stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil
		}
		return d.mapErr(err)
	}
	for p := 0; p < maxPartitions; p++ {
		n := names(p)
		if _, err := d.js.Stream(ctx, n.queue); errors.Is(err, jetstream.ErrStreamNotFound) {
			break
		}
		if err := errors.Join(del(n.queue), del(n.sched)); err != nil {
			return err
		}
	}
	for _, s := range more {
		if err := del(s); err != nil {
			return err
		}
	}
	return nil
}

// jsPartition is one partition's streams and, for queues without
// sessions, its shared pull consumer.
type jsPartition struct {
	idx   int
	n     jsNames
	queue jetstream.Stream
	sched jetstream.Stream
	cons  jetstream.Consumer

	// replicated: the streams have replicas, which serve no reads (see
	// leaderReads), and a settle waits for the removal (see acked).
	replicated bool

	// Upkeep state, shared by every handle on this partition in one
	// broker (see jsDriver.keepOf).
	*partKeep

	// The queue stream's size as last read plus this broker's copies not
	// yet sourced into it, and those copies, for MaxBytes (see checkFull).
	sizeMu    sync.Mutex
	size      uint64
	sizeRead  time.Time
	unsourced []sentCopy
	sending   uint64 // reserved by sends under way

	// The consumer whose pending count is the number of schedules (see
	// jsQueue.scheduled).
	countMu sync.Mutex
	counter jetstream.Consumer
}

// partKeep is the upkeep state of one queue partition in one broker,
// shared by every Queue handle on the partition: the receivers' cancel
// record lookups, and the housekeeping state (owned by the broker's
// housekeeper, see keepState), so that what a receiver notes saves
// housekeeping a look, and the other way round.
type partKeep struct {
	created time.Time // of the stream, see keepOf

	// The receivers' cancel record lookups, shared (see lookup.Group).
	lookups lookup.Group

	// sent is the highest schedule-stream sequence of a message this
	// broker sent to the partition (see pull.Puller.Expecting).
	sent atomic.Uint64

	// Housekeeping's, touched by the housekeeper's methods alone.
	keep keepState
}

// keepOf returns the upkeep state of the partition whose schedule stream
// (or, without one, queue stream) is named stream and was created at
// created: a stream deleted and created again under its name starts
// afresh, since sequence numbers start over.
func (d *jsDriver) keepOf(stream string, created time.Time) *partKeep {
	d.keepMu.Lock()
	defer d.keepMu.Unlock()
	if d.keeps == nil {
		d.keeps = make(map[string]*partKeep)
	}
	k := d.keeps[stream]
	if k == nil || !k.created.Equal(created) {
		k = &partKeep{created: created}
		d.keeps[stream] = k
	}
	return k
}

// keep attaches part to its upkeep state, once its streams are known.
func (d *jsDriver) keep(part *jsPartition) {
	s := part.queue
	if part.sched != nil {
		s = part.sched
	}
	part.partKeep = d.keepOf(s.CachedInfo().Config.Name, s.CachedInfo().Created)
}
