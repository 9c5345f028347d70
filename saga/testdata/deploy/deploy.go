// Package deploy is what the two releases of the saga in
// TestRollingDeployOfTwoBinaries (saga/version_deploy_test.go) share: the
// message the test sends, and a worker's main, which runs a dispatcher on
// a NATS server until SIGTERM and reports what the test checks on
// stdout, a JSON Event a line. The releases are the main packages
// release1 and release2, which the test builds with go build; each
// defines only its own version of the saga, as two releases of a service
// would.
package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/transport"
)

// Queue is the workers' queue; Saga the saga's name in both releases.
const (
	Queue = "deploy"
	Saga  = "deploy-counter"
)

// VersionWait is the workers' saga.WithVersionWait: short, so that a
// message an old worker leaves comes back soon.
const VersionWait = 200 * time.Millisecond

// Add adds N to counter ID.
type Add struct {
	ID string
	N  int
}

func (Add) MessageName() string { return "deploy.Add" }

// Event is a line a worker writes on stdout.
type Event struct {
	Event  string `json:"event"` // ready, put, step or stopped
	Worker string `json:"worker"`

	// put: a record the worker's store wrote, with its revision and the
	// version of its data (1 when the record has none).
	Key     string `json:"key,omitempty"`
	Rev     uint64 `json:"rev,omitempty"`
	Version int    `json:"version,omitempty"`

	// step: how a step ended (saga.Hooks.StepDone), on which instance,
	// for which message; Ahead: its error matches
	// saga.ErrDataVersionAhead.
	Outcome   saga.Outcome `json:"outcome,omitempty"`
	ID        string       `json:"id,omitempty"`
	MessageID string       `json:"message_id,omitempty"`
	Ahead     bool         `json:"ahead,omitempty"`

	// stopped: the outcomes of the worker's steps, as its hooks counted
	// them, once Run returned after SIGTERM.
	Outcomes map[saga.Outcome]int `json:"outcomes,omitempty"`
}

// Main runs a worker of def and exits: -nats URL names the server, -name
// the worker in its lines. It says "ready" once its queue is open, and
// runs until SIGTERM or SIGINT (a graceful stop: the steps in flight
// finish, then it says "stopped" and exits 0) or until its stdin closes
// (the test that started it is gone).
func Main(def saga.Saga) {
	url := flag.String("nats", "", "NATS server URL")
	name := flag.String("name", "worker", "the worker's name in its lines")
	flag.Parse()
	if err := run(def, *url, *name); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", *name, err)
		os.Exit(1)
	}
}

func run(def saga.Saga, url, name string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	out := &reporter{enc: json.NewEncoder(os.Stdout), worker: name, outcomes: map[saga.Outcome]int{}}

	nc, err := nats.Connect(url, nats.Name(name))
	if err != nil {
		return err
	}
	defer nc.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	broker, err := transport.NewJetStream(nc, transport.WithLogger(logger))
	if err != nil {
		return err
	}
	defer broker.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	kv, err := kvstore.New(ctx, js, kvstore.Config{})
	if err != nil {
		return err
	}
	d, err := saga.NewDispatcher(broker, loggedStore{kv, out}, Queue, saga.WithSagas(def),
		saga.WithQueueConfig(transport.QueueConfig{LockDuration: time.Second}), // a killed worker's messages come back soon
		saga.WithVersionWait(VersionWait), saga.WithDrainTimeout(10*time.Second), saga.WithLogger(logger),
		saga.WithRetry(saga.RetryPolicy{Immediate: 3, Delayed: 5, Backoff: func(int) time.Duration { return 100 * time.Millisecond }}),
		saga.WithHooks(saga.Hooks{StepDone: out.step}))
	if err != nil {
		return err
	}
	if err := d.Open(ctx); err != nil {
		return err
	}
	out.emit(Event{Event: "ready"})
	if err := d.Run(ctx); err != nil {
		return err
	}
	out.mu.Lock()
	outcomes := out.outcomes
	out.mu.Unlock()
	out.emit(Event{Event: "stopped", Outcomes: outcomes})
	return nil
}

// reporter writes a worker's lines and counts its steps' outcomes.
type reporter struct {
	mu       sync.Mutex
	enc      *json.Encoder
	worker   string
	outcomes map[saga.Outcome]int
}

func (r *reporter) emit(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.Worker = r.worker
	if err := r.enc.Encode(e); err != nil {
		fmt.Fprintf(os.Stderr, "%s: stdout: %v\n", r.worker, err)
	}
}

func (r *reporter) step(_ context.Context, info saga.StepInfo, res saga.StepResult) {
	r.mu.Lock()
	r.outcomes[res.Outcome]++
	r.mu.Unlock()
	r.emit(Event{Event: "step", Outcome: res.Outcome, ID: info.ID, MessageID: info.MessageID,
		Ahead: errors.Is(res.Err, saga.ErrDataVersionAhead)})
}

// loggedStore reports every record its store wrote, with the revision
// and the data version the record carries.
type loggedStore struct {
	*kvstore.Store
	out *reporter
}

func (s loggedStore) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	n, err := s.Store.Put(ctx, key, value, rev)
	if err == nil {
		s.out.emit(Event{Event: "put", Key: key, Rev: n, Version: RecordVersion(value)})
	}
	return n, err
}

// RecordVersion returns the data version a stored saga record carries: 1
// when it has none, -1 when it is not a record.
func RecordVersion(value []byte) int {
	var r struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(value, &r); err != nil {
		return -1
	}
	return max(r.Version, 1)
}
