package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/internal/natserr"
	"github.com/jetsaga/jetsaga/saga"
)

// Config describes the bucket. The zero value picks the defaults.
type Config struct {
	// Bucket is the KV bucket name. Default: "jetsaga_sagas".
	Bucket string
	// Replicas is the replication factor. Default: 1.
	Replicas int
	// MemoryStorage keeps the bucket in memory. Default: false (files).
	MemoryStorage bool
	// MarkerTTL is how long the bucket keeps the marker a removed key
	// leaves — deleted by Delete, or expired (the tombstone of a completed
	// saga, see PutTTL) — after which the key leaves no trace in the
	// stream. Default: 1 hour. Minimum: 1 second.
	MarkerTTL time.Duration
}

// DefaultMarkerTTL is Config.MarkerTTL's default.
const DefaultMarkerTTL = time.Hour

// Store is a saga.ExpiringStore on a JetStream KV bucket.
type Store struct {
	leaderGet string // API subject of leader reads, on replicated buckets
	directGet string // API subject of direct gets, on buckets of one replica (listDirect)
	kv        jetstream.KeyValue
	js        jetstream.JetStream
	prefix    string // the subject prefix of the bucket's keys
	markerTTL time.Duration
}

var _ saga.ExpiringStore = (*Store)(nil)

// New creates the bucket if needed, or updates it, and returns a Store on
// it. The bucket keeps one revision per key and no age limit: the state of
// a running saga never expires; a completed saga's tombstone does (PutTTL),
// and so do the markers removed keys leave (Config.MarkerTTL), which needs
// nats-server 2.11 or later.
func New(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = "jetsaga_sagas"
	}
	if cfg.MarkerTTL == 0 {
		cfg.MarkerTTL = DefaultMarkerTTL
	}
	if cfg.MarkerTTL < time.Second {
		return nil, fmt.Errorf("kvstore: MarkerTTL %v: must be at least 1s", cfg.MarkerTTL)
	}
	storage := jetstream.FileStorage
	if cfg.MemoryStorage {
		storage = jetstream.MemoryStorage
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:         cfg.Bucket,
		Description:    "jetsaga saga state",
		History:        1,
		Storage:        storage,
		Replicas:       max(cfg.Replicas, 1),
		LimitMarkerTTL: cfg.MarkerTTL,
	})
	if err != nil {
		return nil, fmt.Errorf("kvstore: bucket %s: %w", cfg.Bucket, err)
	}
	st := &Store{kv: kv, js: js, prefix: "$KV." + cfg.Bucket + ".", markerTTL: cfg.MarkerTTL}
	if cfg.Replicas > 1 {
		st.readFromLeader(js, cfg.Bucket)
	} else {
		st.directGet = apiPrefix(js) + ".DIRECT.GET.KV_" + cfg.Bucket
	}
	return st, nil
}

func (s *Store) readFromLeader(js jetstream.JetStream, bucket string) {
	s.leaderGet = apiPrefix(js) + ".STREAM.MSG.GET.KV_" + bucket
	s.directGet = "" // a replica may answer a direct get
}

// apiPrefix is the JetStream API's subject prefix, without its last dot.
func apiPrefix(js jetstream.JetStream) string {
	prefix := js.Options().APIPrefix
	if prefix == "" {
		prefix = jetstream.DefaultAPIPrefix
	}
	return strings.TrimSuffix(prefix, ".")
}

// Load returns the value and revision of key, or saga.ErrNotFound.
//
// On a replicated bucket it reads from the stream's leader: nats.go's KV
// reads are direct gets that any replica may answer, and a replica that
// lags behind would report a just-created instance as missing (its
// message dead-lettered as saga-not-found) or an old revision.
func (s *Store) Load(ctx context.Context, key string) ([]byte, uint64, error) {
	if s.leaderGet != "" {
		return s.loadFromLeader(ctx, key)
	}
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, 0, fmt.Errorf("%w: %s: %w", saga.ErrNotFound, key, err)
	}
	if err != nil {
		return nil, 0, storeErr("load", key, err)
	}
	return e.Value(), e.Revision(), nil
}

// loadFromLeader reads key's last message with the JetStream API's
// (non-direct) message get, which the stream's leader answers.
func (s *Store) loadFromLeader(ctx context.Context, key string) ([]byte, uint64, error) {
	req, err := json.Marshal(map[string]string{"last_by_subj": s.prefix + key})
	if err != nil {
		return nil, 0, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	resp, err := s.js.Conn().RequestWithContext(ctx, s.leaderGet, req)
	if err != nil {
		return nil, 0, storeErr("load", key, err)
	}
	var r struct {
		Message *struct {
			Seq  uint64 `json:"seq"`
			Hdrs []byte `json:"hdrs"`
			Data []byte `json:"data"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, 0, storeErr("load", key, err)
	}
	switch {
	case r.Error != nil && r.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, 0, fmt.Errorf("%w: %s: %w", saga.ErrNotFound, key, jetstream.ErrKeyNotFound)
	case r.Error != nil:
		return nil, 0, storeErr("load", key, r.Error)
	case r.Message == nil:
		return nil, 0, fmt.Errorf("kvstore: load %s: empty response", key)
	}
	if len(r.Message.Hdrs) > 0 {
		h, err := nats.DecodeHeadersMsg(r.Message.Hdrs)
		if err != nil {
			return nil, 0, storeErr("load", key, err)
		}
		if op := h.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
			return nil, 0, fmt.Errorf("%w: %s: %w", saga.ErrNotFound, key, jetstream.ErrKeyDeleted)
		}
	}
	return r.Message.Data, r.Message.Seq, nil
}

// Put writes value if key's revision is rev (0: create). A revision
// mismatch (JetStream error 10071) is saga.ErrConflict.
func (s *Store) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	var err error
	var n uint64
	if rev == 0 {
		n, err = s.kv.Create(ctx, key, value)
	} else {
		n, err = s.kv.Update(ctx, key, value, rev)
	}
	return n, s.putErr(ctx, key, value, rev, err)
}

// PutTTL is Put, and the key expires ttl after this write (at the
// server's next expiry check, within about a second; TTLs are whole
// seconds, rounded up). A later Put keeps the key for good.
func (s *Store) PutTTL(ctx context.Context, key string, value []byte, rev uint64, ttl time.Duration) (uint64, error) {
	if ttl < time.Second {
		ttl = time.Second
	}
	ttl = (ttl + time.Second - 1).Truncate(time.Second)
	if rev == 0 {
		n, err := s.kv.Create(ctx, key, value, jetstream.KeyTTL(ttl))
		return n, s.putErr(ctx, key, value, rev, err)
	}
	// KeyValue.Update takes no TTL: publish as it does, with one.
	ack, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: s.prefix + key, Data: value},
		jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(ttl))
	if err != nil {
		return 0, s.putErr(ctx, key, value, rev, err)
	}
	return ack.Sequence, nil
}

func (s *Store) putErr(ctx context.Context, key string, value []byte, rev uint64, err error) error {
	if err == nil {
		return nil
	}
	if inFlight(err) {
		return s.inFlightErr(ctx, "put", key, rev, err)
	}
	if isConflict(err) {
		return fmt.Errorf("%w: %s: %w", saga.ErrConflict, key, err)
	}
	if errors.Is(err, nats.ErrMaxPayload) {
		// Retrying cannot make the record smaller: the step fails for good.
		return saga.Permanent(fmt.Errorf("kvstore: put %s: record of %d bytes: %w", key, len(value), err))
	}
	return storeErr("put", key, err)
}

// Delete removes key if its revision is rev; a missing key is
// saga.ErrNotFound. The purge marker it leaves expires after
// Config.MarkerTTL.
func (s *Store) Delete(ctx context.Context, key string, rev uint64) error {
	if _, _, err := s.Load(ctx, key); err != nil {
		return err
	}
	if rev == 0 {
		return fmt.Errorf("%w: %s exists; delete needs its revision", saga.ErrConflict, key)
	}
	err := s.kv.Purge(ctx, key, jetstream.LastRevision(rev), jetstream.PurgeTTL(s.markerTTL))
	if inFlight(err) {
		return s.inFlightErr(ctx, "delete", key, rev, err)
	}
	if isConflict(err) {
		return fmt.Errorf("%w: %s: %w", saga.ErrConflict, key, err)
	}
	if err != nil {
		return storeErr("delete", key, err)
	}
	return nil
}

// storeErr describes a failed op on key; a failure to reach the server or
// the bucket's stream (see natserr.Unavailable) matches
// saga.ErrUnavailable, so that a dispatcher waits through the outage.
func storeErr(op, key string, err error) error {
	if natserr.Unavailable(err) {
		return fmt.Errorf("%w: kvstore: %s %s: %w", saga.ErrUnavailable, op, key, err)
	}
	return fmt.Errorf("kvstore: %s %s: %w", op, key, err)
}

// isConflict reports a write refused because the key's revision is not
// the one expected. A refusal because another write of the key is still
// being replicated (inFlight) is not one: that write's outcome is not
// known yet, and loading the key again would only find the revision
// before it.
func isConflict(err error) bool {
	if inFlight(err) {
		return false
	}
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) ||
		errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// inFlight reports the server's refusal of a write because an earlier
// write of the same key is proposed to the stream's replicas and not
// applied yet (JetStream error 10164, "wrong last sequence" without a
// number). nats.go's Create reports it as jetstream.ErrKeyExists joined
// with the server's error.
func inFlight(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// inFlightErr tells what an inFlight refusal (err) of op on key, written
// at revision rev, was. On a healthy cluster the earlier write is applied
// within milliseconds: the key's revision moves on, and the refusal is a
// conflict (the caller loads and retries). Without quorum — two of three
// nodes down, say — it is never applied and the revision stays: an outage
// (saga.ErrUnavailable), which the dispatcher waits out. (Reported as a
// conflict, the step would spend its conflict retries in milliseconds and
// be dead-lettered.) It looks for up to inFlightWait.
func (s *Store) inFlightErr(ctx context.Context, op, key string, rev uint64, err error) error {
	wctx, cancel := context.WithTimeout(ctx, inFlightWait)
	defer cancel()
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 200*time.Millisecond) {
		_, now, lerr := s.Load(wctx, key)
		switch {
		case lerr == nil && now != rev, errors.Is(lerr, saga.ErrNotFound) && rev != 0:
			return fmt.Errorf("%w: %s: %w", saga.ErrConflict, key, err)
		case lerr != nil && !errors.Is(lerr, saga.ErrNotFound) && wctx.Err() == nil:
			return lerr
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("%w: kvstore: %s %s: an earlier write of the key is not replicated yet: %w", saga.ErrUnavailable, op, key, err)
		case <-time.After(pause):
		}
	}
}

// inFlightWait bounds inFlightErr's look: well beyond a healthy cluster's
// replication, well within a step's time.
const inFlightWait = 2 * time.Second
