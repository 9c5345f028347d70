package saga

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// The catalog: what a dispatcher publishes about the sagas it runs, for
// tools that have no saga definitions (the jetsaga command, its web
// console) to draw them. See "Diagrams" in docs/state-machines.md.

// CatalogKeyPrefix starts the key of each catalog entry in the state of
// a dispatcher's queue (transport.Queue.LoadState): the entry of saga
// "order" is "=catalog.order". No saga's records can take such a key (a
// saga's name has no "="), so the catalog can share a queue's state with
// saga/queuestore.
const CatalogKeyPrefix = "=catalog."

// ErrNoCatalogEntry is returned by LoadCatalogEntry when no dispatcher
// on the queue published the saga.
var ErrNoCatalogEntry = errors.New("saga: no catalog entry")

// CatalogEntry describes a saga as a dispatcher publishes it: its name,
// data version, the queue it runs on, its diagram as Mermaid text, and
// its states and transitions as data, so that a tool can count instances
// per state and draw an instance's path.
type CatalogEntry struct {
	// Saga is the saga's name.
	Saga string `json:"saga"`
	// Version is the saga's data version (DataVersion): of two
	// dispatchers in a rolling deploy, the one of the newer version
	// publishes.
	Version int `json:"version"`
	// Queue is the queue of the dispatcher that published it.
	Queue string `json:"queue"`
	// Kind is "machine" for a saga built by package saga/machine (or any
	// that gave DescribeStates a graph), "saga" for the others.
	Kind string `json:"kind"`
	// Mermaid is the diagram as Mermaid text: Machine.Mermaid for a
	// machine, Definition.Mermaid for a plain saga.
	Mermaid string `json:"mermaid"`
	// Graph lists the states and the transitions between them.
	Graph StateGraph `json:"graph"`
	// Published is when the dispatcher wrote the entry.
	Published time.Time `json:"published"`
}

// StateGraph is a saga's states and the transitions between them, as
// data. An instance of a machine is in one of States, its data's
// "machine.state" (empty for Initial). A plain saga has three: Initial
// (no instance yet), Running and Completed, and its messages and
// timeouts are the transitions.
type StateGraph struct {
	// Initial is the state an instance starts from.
	Initial string `json:"initial"`
	// Final is the state of a completed instance.
	Final string `json:"final"`
	// States are every state, Initial first, Final last.
	States []string `json:"states"`
	// Transitions are the arrows, in a stable order.
	Transitions []GraphTransition `json:"transitions"`
}

// GraphTransition is one arrow of a StateGraph: the event (a message
// type, a timeout, a request's outcome) that takes an instance From a
// state To another (or the same), and the branches of the guards it
// takes ("if", "else", or nested ones space-separated, "if else"; empty
// without a guard).
type GraphTransition struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Event string `json:"event"`
	Guard string `json:"guard,omitempty"`
}

// The states of a plain saga's graph.
const (
	PlainInitial   = "Initial"
	PlainRunning   = "Running"
	PlainCompleted = "Completed"
)

// machineDescription is what DescribeStates attached to a definition.
type machineDescription struct {
	mermaid string
	graph   StateGraph
}

// DescribeStates attaches a state machine's diagram to d: its Mermaid
// text and its states and transitions. It is the seam through which a
// package that builds sagas as state machines (saga/machine calls it in
// Machine.Build) makes the catalog (Definition.Describe) show the
// machine rather than the plain saga it compiles to. Call it before
// registering d with a dispatcher.
func DescribeStates[S any](d *Definition[S], mermaid string, g StateGraph) {
	g.States = slices.Clone(g.States)
	g.Transitions = slices.Clone(g.Transitions)
	d.machine = &machineDescription{mermaid: mermaid, graph: g}
}

// Describe returns the saga's catalog entry as a dispatcher on queue
// publishes it (Published is left zero).
func (d *Definition[S]) Describe(queue string) CatalogEntry {
	e := CatalogEntry{Saga: d.name, Version: d.DataVersion(), Queue: queue}
	if m := d.machine; m != nil {
		e.Kind, e.Mermaid = "machine", m.mermaid
		e.Graph = m.graph
		e.Graph.States = slices.Clone(m.graph.States)
		e.Graph.Transitions = slices.Clone(m.graph.Transitions)
		return e
	}
	e.Kind, e.Mermaid, e.Graph = "saga", d.Mermaid(), d.plainGraph()
	return e
}

// plainGraph is a plain saga's StateGraph: starters lead from Initial to
// Running, handled messages and timeouts loop on Running, completion
// leads to Completed.
func (d *Definition[S]) plainGraph() StateGraph {
	g := StateGraph{Initial: PlainInitial, Final: PlainCompleted, States: []string{PlainInitial, PlainRunning, PlainCompleted}}
	for name, r := range d.routes {
		t := GraphTransition{From: PlainRunning, To: PlainRunning, Event: name}
		switch r.kind {
		case routeStart:
			t.From = PlainInitial
		case routeTimeout:
			t.Event = "timeout " + name
		}
		g.Transitions = append(g.Transitions, t)
	}
	slices.SortFunc(g.Transitions, func(a, b GraphTransition) int {
		return cmp.Or(cmp.Compare(a.From, b.From), cmp.Compare(a.Event, b.Event))
	})
	g.Transitions = append(g.Transitions, GraphTransition{From: PlainRunning, To: PlainCompleted, Event: "MarkComplete"})
	return g
}

// describer is the type-erased Describe the dispatcher calls.
type describer interface {
	Describe(queue string) CatalogEntry
}

// publishCatalog writes the catalog entry of each of the dispatcher's
// sagas to its queue's state, where it differs (see PublishCatalogEntry).
// A failure is logged at Warn: it never stops the dispatcher.
func (d *Dispatcher) publishCatalog(ctx context.Context, q *transport.Queue) {
	names := make([]string, 0, len(d.byName))
	for n := range d.byName {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		ds, ok := d.byName[n].(describer)
		if !ok {
			continue
		}
		e := ds.Describe(d.queueName)
		e.Published = d.cfg.now().UTC()
		written, err := PublishCatalogEntry(ctx, q, e)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			d.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "saga: publishing the catalog entry failed",
				slog.String("saga", n), slog.String("queue", d.queueName), slog.Any("error", err))
		case written:
			d.cfg.logger.LogAttrs(ctx, slog.LevelDebug, "saga: published the catalog entry",
				slog.String("saga", n), slog.Int("version", e.Version))
		}
	}
}

// PublishCatalogEntry writes e to q's state under CatalogKeyPrefix +
// e.Saga, unless the entry stored there is of a newer version, or of the
// same version and the same otherwise (Published aside): dispatchers of
// one version leave it be, a newer version replaces an older one, and an
// older one never replaces a newer one (a rolling deploy). Of two
// dispatchers of the same version that describe the saga differently,
// the one that starts last wins. It reports whether it wrote. A
// concurrent write is retried (optimistic concurrency on the record's
// revision).
func PublishCatalogEntry(ctx context.Context, q *transport.Queue, e CatalogEntry) (bool, error) {
	value, err := json.Marshal(e)
	if err != nil {
		return false, err
	}
	key := CatalogKeyPrefix + e.Saga
	for range 5 {
		old, rev, err := loadCatalogEntry(ctx, q, key)
		switch {
		case errors.Is(err, ErrNoCatalogEntry):
		case err != nil:
			return false, err
		case old.Version > e.Version:
			return false, nil
		case old.Version == e.Version && sameEntry(old, e):
			return false, nil
		}
		_, err = q.CommitState(ctx, transport.StateCommit{Key: key, Value: value, Rev: rev})
		if errors.Is(err, transport.ErrStateConflict) {
			continue
		}
		return err == nil, err
	}
	return false, fmt.Errorf("saga: catalog entry %s: concurrent writes: %w", e.Saga, transport.ErrStateConflict)
}

func sameEntry(a, b CatalogEntry) bool {
	a.Published, b.Published = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

// LoadCatalogEntry reads the catalog entry of saga sagaName from q's
// state, or returns ErrNoCatalogEntry if no dispatcher on q published it.
func LoadCatalogEntry(ctx context.Context, q *transport.Queue, sagaName string) (CatalogEntry, error) {
	if err := transport.ValidateQueueName(sagaName); err != nil {
		return CatalogEntry{}, fmt.Errorf("%w: saga name %.64q", ErrNoCatalogEntry, sagaName)
	}
	e, _, err := loadCatalogEntry(ctx, q, CatalogKeyPrefix+sagaName)
	return e, err
}

func loadCatalogEntry(ctx context.Context, q *transport.Queue, key string) (CatalogEntry, uint64, error) {
	raw, rev, err := q.LoadState(ctx, key)
	if errors.Is(err, transport.ErrStateNotFound) {
		return CatalogEntry{}, 0, fmt.Errorf("%w: %s on queue %s", ErrNoCatalogEntry, strings.TrimPrefix(key, CatalogKeyPrefix), q.Name())
	}
	if err != nil {
		return CatalogEntry{}, 0, err
	}
	var e CatalogEntry
	if err := json.Unmarshal(raw, &e); err != nil {
		// Unreadable (written by a future release?): replace it as if
		// it were of version 0.
		return CatalogEntry{}, rev, nil
	}
	return e, rev, nil
}
