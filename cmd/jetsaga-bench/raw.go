package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetsaga/jetsaga/transport"
)

// The message both sides send: a ~100 B JSON body with a content type and
// a unique MessageID, as a saga timeout carries.
const contentType = "application/json"

var body = []byte(`{"saga":"twofactor","instance":"b7f3c2a4-5e1d-4c8a-9f20-3d6e8a1b0c57","timeout":"CodeExpired"}` + "\n")

func jetMessage(id string) *transport.Message {
	return &transport.Message{Body: body, ContentType: contentType, MessageID: id}
}

// Headers as transport's encodeHeader (header.go) writes them, plus what
// natsMsg and schedule (jetstream_send.go, jetstream_schedule.go) add. They are unexported, so
// the raw side spells the same header out by hand.
const (
	hdrMessageID   = "Jetsaga-Message-Id"
	hdrContentType = "Jetsaga-Content-Type"
	hdrScheduledAt = "Jetsaga-Scheduled-At"
	hdrCancelled   = "Jetsaga-Cancelled"
)

// rawSendMsg is the message Queue.Send publishes for jetMessage(id).
func rawSendMsg(subject, id string) *nats.Msg {
	return &nats.Msg{Subject: subject, Data: body, Header: nats.Header{
		hdrMessageID:          {id},
		hdrContentType:        {contentType},
		jetstream.MsgIDHeader: {id},
	}}
}

// rawScheduleMsg is the message Queue.Schedule publishes for jetMessage(id)
// due at `at`: its own schedule subject under prefix, and the target.
func rawScheduleMsg(prefix, id string, at time.Time) *nats.Msg {
	due := at.UTC().Format(time.RFC3339Nano)
	return &nats.Msg{Subject: prefix + ".s." + nuid.Next(), Data: body, Header: nats.Header{
		hdrMessageID:           {id},
		hdrContentType:         {contentType},
		hdrScheduledAt:         {due},
		jetstream.MsgIDHeader:  {id},
		"Nats-Schedule":        {"@at " + due},
		"Nats-Schedule-Target": {prefix + ".f.m"},
	}}
}

// createStream creates a raw stream with e.replicas replicas and checks
// that the server kept the replicas and the flags asked for.
func (e *env) createStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	cfg.Replicas = e.replicas()
	s, err := e.js.CreateStream(ctx, cfg)
	if err != nil {
		return nil, err
	}
	got := s.CachedInfo().Config
	if got.Replicas != cfg.Replicas || got.AllowDirect != cfg.AllowDirect || got.AllowMsgSchedules != cfg.AllowMsgSchedules ||
		got.AllowAtomicPublish != cfg.AllowAtomicPublish {
		return nil, fmt.Errorf("stream %s created with replicas %d, direct %t, schedules %t, atomic %t; asked for %d, %t, %t, %t", cfg.Name,
			got.Replicas, got.AllowDirect, got.AllowMsgSchedules, got.AllowAtomicPublish,
			cfg.Replicas, cfg.AllowDirect, cfg.AllowMsgSchedules, cfg.AllowAtomicPublish)
	}
	return s, nil
}

// rawScheduleStream creates a stream configured as the transport's
// schedule stream (jetstream_provision.go, provision), on subjects prefix.>.
func (e *env) rawScheduleStream(ctx context.Context, name, prefix string) (jetstream.Stream, error) {
	e.dropStream(ctx, name)
	return e.createStream(ctx, jetstream.StreamConfig{
		Name:              name,
		Subjects:          []string{prefix + ".>"},
		Storage:           jetstream.FileStorage,
		Retention:         jetstream.LimitsPolicy,
		Discard:           jetstream.DiscardOld,
		MaxBytes:          -1,
		MaxMsgs:           -1,
		Duplicates:        10 * time.Minute,
		AllowDirect:       e.replicas() <= 1, // as the transport's: leader reads when replicated
		AllowMsgSchedules: true,
		AllowMsgTTL:       true,
	})
}

// workQueueConfig is the config of the transport's queue stream: work-queue
// retention on subjects prefix.>, nothing evicted, direct gets allowed
// unless replicated (as the transport's: leader reads then).
func (e *env) workQueueConfig(name, prefix string) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        name,
		Subjects:    []string{prefix + ".>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.WorkQueuePolicy,
		Discard:     jetstream.DiscardNew,
		MaxBytes:    -1,
		MaxMsgs:     -1,
		Duplicates:  10 * time.Minute,
		AllowDirect: e.replicas() <= 1,
	}
}

// rawQueueStream creates a stream and pull consumer configured as the
// transport's queue stream and its "recv" consumer, on subjects prefix.>,
// the consumer filtered on prefix.m.
func (e *env) rawQueueStream(ctx context.Context, name, prefix string) (jetstream.Stream, jetstream.Consumer, error) {
	e.dropStream(ctx, name)
	s, err := e.createStream(ctx, e.workQueueConfig(name, prefix))
	if err != nil {
		return nil, nil, err
	}
	c, err := s.CreateOrUpdateConsumer(ctx, recvConsumer(prefix+".m"))
	return s, c, err
}

// rawSourcingStream creates a work-queue stream that sources the
// activation subjects (srcPrefix.f.>) of schedule stream src into
// prefix.>, as the transport's queue stream did (jetstream_provision.go, provision).
func (e *env) rawSourcingStream(ctx context.Context, name, prefix, src, srcPrefix string) error {
	e.dropStream(ctx, name)
	cfg := e.workQueueConfig(name, prefix)
	cfg.Sources = []*jetstream.StreamSource{{
		Name: src,
		SubjectTransforms: []jetstream.SubjectTransformConfig{{
			Source:      srcPrefix + ".f.>",
			Destination: prefix + ".>",
		}},
	}}
	_, err := e.createStream(ctx, cfg)
	return err
}

// recvConsumer is the transport's "recv" consumer with the default
// LockDuration of 30s.
func recvConsumer(filter string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       "recv",
		FilterSubject: filter,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    -1,
		MaxAckPending: -1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// rawGuardedCancel is what transport's cancel (jetstream_schedule.go) does,
// written with raw nats.go calls: read the schedule, then publish a cancel
// record that purges it, guarded by the schedule's subject sequence.
func rawGuardedCancel(ctx context.Context, js jetstream.JetStream, s jetstream.Stream, prefix string, seq uint64) error {
	raw, err := s.GetMsg(ctx, seq)
	if err != nil {
		return err
	}
	id := strings.TrimPrefix(raw.Subject, prefix+".s.")
	rec := &nats.Msg{Subject: prefix + ".x." + id, Header: nats.Header{
		hdrCancelled:         {"1"},
		"Nats-Schedule-Next": {"purge"},
		"Nats-Scheduler":     {raw.Subject},
		"Nats-TTL":           {"604800s"},
	}}
	_, err = js.PublishMsg(ctx, rec, jetstream.WithExpectLastSequenceForSubject(seq, raw.Subject))
	return err
}

// rawNames mirrors the transport's names (jetstream_names.go, names) with the
// prefix RAWJS, as long as jetsaga's BENCH, so that raw subjects have the
// same shape: kind "S" for a schedule stream, "Q" for a queue stream.
func rawNames(kind, queue string) (stream, prefix string) {
	return "RAWJS_" + kind + "_" + queue + "_0", "RAWJS." + kind + "." + queue + ".0"
}
