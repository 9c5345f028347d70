package main

import (
	"context"
	"fmt"
	"time"
)

// A peer is one system measured: how it schedules and cancels one-shot
// timers, runs a two-step saga with one timer, and which processes besides
// this one it runs on (a database or a server).
type peer struct {
	// name is the row's name; config says how it is set up.
	name, config string
	// open starts the system's timers for one workload: fire is called in
	// the handler of each timer, with the timer's id. Nil where the system
	// has no one-shot timers of its own.
	open func(ctx context.Context, fire func(id int)) (timers, error)
	// saga starts the system's two-step saga: step one requests a timer of
	// delay, the timer's step calls done(id) and ends the instance.
	saga func(ctx context.Context, delay time.Duration, done func(id int)) (sagas, error)
	// servers lists the system's processes other than this one (postgres's
	// processes, the Temporal dev server), for their CPU and memory.
	servers func() []int
	// pending is the child process's command line flags for workload (d);
	// empty where it does not apply.
	pending []string
	// pendingSetup, if set, prepares workload (d): a server of its own for
	// the child (extra flags), the processes to measure, and a stop.
	pendingSetup func(ctx context.Context) (extra []string, servers func() []int, stop func(), err error)
	// noCancel: the timers have no cancel of their own (workload b).
	noCancel bool
}

// peerKeys name the peers in the order they run; raw first, as the
// baseline every ratio is taken to.
var peerKeys = []string{"raw", "jetsaga", "jetsaga-saga", "jetsaga-early", "river", "river-tuned", "dbos-pg", "dbos-sqlite", "temporal"}

// peerFor makes the peer key names, starting the servers it needs.
func peerFor(ctx context.Context, e *env, key string) (peer, error) {
	switch key {
	case "raw":
		return rawPeer(e), nil
	case "jetsaga":
		return jetsagaPeer(e), nil
	case "jetsaga-saga":
		return jetsagaSagaPeer(e, 0), nil
	case "jetsaga-early":
		return jetsagaSagaPeer(e, e.cfg.lead), nil
	case "river", "river-tuned":
		return riverPeer(ctx, e, key == "river-tuned")
	case "dbos-pg":
		return dbosPeer(ctx, e, false)
	case "dbos-sqlite":
		return dbosPeer(ctx, e, true)
	case "temporal":
		return temporalPeer(ctx, e)
	}
	return peer{}, fmt.Errorf("unknown peer %q", key)
}

// timers is a system's timer API as a workload uses it.
type timers interface {
	// schedule arranges for the timer id to reach its handler at due and
	// returns what cancel needs.
	schedule(ctx context.Context, id int, due time.Time) (ref any, err error)
	// cancel cancels a pending timer.
	cancel(ctx context.Context, ref any) error
	// close stops the system and removes what the workload made.
	close()
}

// bulkTimers is implemented by systems that schedule many timers in one
// call, as their docs recommend for bulk work (River's InsertMany).
type bulkTimers interface {
	scheduleMany(ctx context.Context, ids []int, due time.Time) error
}

// sagas is a running two-step saga.
type sagas interface {
	// start starts instance id.
	start(ctx context.Context, id int) error
	close()
}
