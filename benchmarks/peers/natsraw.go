package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Raw nats.go: a schedule message per timer on a stream that allows
// message schedules (ADR-51), the due time set with RFC3339Nano (nats.go's
// WithScheduleAt rounds to whole seconds), a pull consumer on the subject
// the schedules fire to; cancel is DeleteMsg of the schedule. The
// baseline every other row stands beside: what nats-server itself does.

var rawSeq atomic.Int64

func rawPeer(e *env) peer {
	return peer{
		name:   "raw nats.go",
		config: "one stream, AllowMsgSchedules, file storage; `Nats-Schedule: @at` (RFC3339Nano); pull consumer with explicit ack; cancel = DeleteMsg",
		open: func(ctx context.Context, fire func(int)) (timers, error) {
			return openRaw(ctx, e, fire)
		},
		saga: func(ctx context.Context, d time.Duration, done func(int)) (sagas, error) {
			return openRawSaga(ctx, e, d, done)
		},
		pending: []string{"-child", "pending", "-peer", "raw"},
	}
}

type rawTimers struct {
	js     jetstream.JetStream
	nc     *nats.Conn
	stream jetstream.Stream
	prefix string
	cc     jetstream.ConsumeContext
}

func openRaw(ctx context.Context, e *env, fire func(int)) (*rawTimers, error) {
	nc, err := e.natsConnect()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	k := rawSeq.Add(1)
	name, prefix := fmt.Sprintf("RAW_%d", k), fmt.Sprintf("RAW.%d", k)
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{prefix + ".>"}, Storage: jetstream.FileStorage,
		Retention: jetstream.LimitsPolicy, AllowMsgSchedules: true, AllowDirect: true, Duplicates: 10 * time.Minute,
	})
	if err != nil {
		nc.Close()
		return nil, err
	}
	t := &rawTimers{js: js, nc: nc, stream: s, prefix: prefix}
	if fire != nil {
		c, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable: "recv", FilterSubject: prefix + ".f", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: -1,
		})
		if err != nil {
			t.close()
			return nil, err
		}
		t.cc, err = c.Consume(func(m jetstream.Msg) {
			id, _ := strconv.Atoi(string(m.Data()))
			fire(id)
			m.Ack()
		})
		if err != nil {
			t.close()
			return nil, err
		}
	}
	return t, nil
}

func (t *rawTimers) schedule(ctx context.Context, id int, due time.Time) (any, error) {
	at := due.UTC().Format(time.RFC3339Nano)
	ids := strconv.Itoa(id)
	ack, err := t.js.PublishMsg(ctx, &nats.Msg{Subject: t.prefix + ".s." + ids, Data: []byte(ids), Header: nats.Header{
		"Nats-Schedule":        {"@at " + at},
		"Nats-Schedule-Target": {t.prefix + ".f"},
		jetstream.MsgIDHeader:  {t.prefix + "-" + ids},
	}})
	if err != nil {
		return nil, err
	}
	return ack.Sequence, nil
}

func (t *rawTimers) cancel(ctx context.Context, ref any) error {
	return t.stream.DeleteMsg(ctx, ref.(uint64))
}

func (t *rawTimers) close() {
	if t.cc != nil {
		t.cc.Stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := t.js.DeleteStream(ctx, t.stream.CachedInfo().Config.Name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		logf("raw: deleting stream: %v", err)
	}
	t.nc.Close()
}

// The raw two-step saga: what the first design of jetsaga did, in raw
// calls. Step one (a start message): create the state in a KV bucket,
// publish a schedule for the timer, ack. Step two (the timer's message):
// get the state, delete it, ack.
type rawSaga struct {
	t     *rawTimers
	kv    jetstream.KeyValue
	cc    jetstream.ConsumeContext
	delay time.Duration
	stop  chan struct{}
}

func openRawSaga(ctx context.Context, e *env, delay time.Duration, done func(int)) (*rawSaga, error) {
	t, err := openRaw(ctx, e, nil)
	if err != nil {
		return nil, err
	}
	s := &rawSaga{t: t, delay: delay}
	bucket := "raw_saga_" + t.stream.CachedInfo().Config.Name
	if s.kv, err = t.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, Storage: jetstream.FileStorage}); err != nil {
		t.close()
		return nil, err
	}
	c, err := t.stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "saga", FilterSubjects: []string{t.prefix + ".in", t.prefix + ".f"}, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: -1,
	})
	if err != nil {
		s.close()
		return nil, err
	}
	// 32 handlers, as a dispatcher runs steps concurrently.
	work := make(chan jetstream.Msg, 256)
	s.stop = make(chan struct{})
	for range 32 {
		go func() {
			for {
				select {
				case m := <-work:
					s.step(ctx, m, done)
				case <-s.stop:
					return
				}
			}
		}()
	}
	s.cc, err = c.Consume(func(m jetstream.Msg) { work <- m }, jetstream.PullMaxMessages(256))
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *rawSaga) step(ctx context.Context, m jetstream.Msg, done func(int)) {
	t, delay := s.t, s.delay
	{
		id, _ := strconv.Atoi(string(m.Data()))
		key := "i" + string(m.Data())
		if m.Subject() == t.prefix+".in" {
			if _, err := s.kv.Create(ctx, key, []byte(`{"step":1}`)); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
				logf("raw saga: create: %v", err)
				m.Nak()
				return
			}
			if _, err := t.schedule(ctx, id, time.Now().Add(delay)); err != nil {
				logf("raw saga: schedule: %v", err)
				m.Nak()
				return
			}
			m.Ack()
			return
		}
		if _, err := s.kv.Get(ctx, key); err != nil {
			logf("raw saga: get: %v", err)
		}
		if err := s.kv.Delete(ctx, key); err != nil {
			logf("raw saga: delete: %v", err)
		}
		done(id)
		m.Ack()
	}
}

func (s *rawSaga) start(ctx context.Context, id int) error {
	_, err := s.t.js.Publish(ctx, s.t.prefix+".in", []byte(strconv.Itoa(id)))
	return err
}

func (s *rawSaga) close() {
	if s.cc != nil {
		s.cc.Stop()
	}
	if s.stop != nil {
		close(s.stop)
	}
	if s.kv != nil {
		s.t.js.DeleteKeyValue(context.Background(), s.kv.Bucket())
	}
	s.t.close()
}
