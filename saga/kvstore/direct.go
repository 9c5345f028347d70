package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// directBatch is the most keys a listing asks the server for at once
// with a batched direct get; a prefix with more keys is listed with a
// watcher.
const directBatch = 512

// errTooMany: the prefix has more keys than one batched direct get
// returns, or the server cannot answer one: list with a watcher.
var errTooMany = errors.New("kvstore: list with a watcher")

// listDirect returns the keys under prefix (whole tokens) with one
// batched direct get of the last message of each matching subject
// (ADR-31 "multi_last", nats-server 2.11 or later): a subject-tree lookup
// on the server, where a watcher's consumer costs more as the bucket
// grows. It needs direct gets (KV buckets allow them), and is used only
// on buckets of one replica: a replica answering a direct get may lag.
func (s *Store) listDirect(ctx context.Context, prefix string) ([]string, error) {
	req, err := json.Marshal(map[string]any{"multi_last": []string{s.prefix + prefix + ">"}, "batch": directBatch})
	if err != nil {
		return nil, err
	}
	nc := s.js.Conn()
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe() //nolint:errcheck // best effort
	if err := nc.PublishRequest(s.directGet, inbox, req); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	var keys []string
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, err
		}
		switch m.Header.Get("Status") {
		case "":
		case "204": // end of batch
			if m.Header.Get("Nats-Num-Pending") != "" && m.Header.Get("Nats-Num-Pending") != "0" {
				return nil, errTooMany
			}
			return keys, nil
		case "404": // none
			return keys, nil
		default:
			return nil, errTooMany
		}
		subj := m.Header.Get(jetstream.SubjectHeader)
		if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" || !strings.HasPrefix(subj, s.prefix) {
			continue
		}
		keys = append(keys, strings.TrimPrefix(subj, s.prefix))
		if len(keys) > directBatch {
			return nil, errTooMany
		}
	}
}
