package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// River on PostgreSQL: a timer is a job inserted with ScheduledAt; its
// handler is the worker's Work; cancel is JobCancel. The saga's first job
// inserts the second with ScheduledAt and completes itself in one
// transaction (InsertTx + JobCompleteTx, River's transactional completion).
//
// River's own tuning for latency: the producer fetches available jobs
// every FetchPollInterval (default 1 s) and at most every FetchCooldown
// (default 100 ms) when LISTEN/NOTIFY tells it of new ones. "river-tuned"
// sets FetchPollInterval 5 ms and FetchCooldown 1 ms (the minimum is 1 ms
// for both). A job inserted with ScheduledAt is in state scheduled until
// the leader's scheduler makes it available: every 5 s, for the jobs due
// within the next 5 s (maintenance.JobSchedulerIntervalDefault; not
// configurable). A timer due more than 5 s after its insert is therefore
// available before it is due and its lateness is set by the fetch poll;
// one due sooner (the saga's 100 ms timer) waits for the scheduler's next
// pass, 0–5 s.

const riverWorkers = 100

func riverPeer(ctx context.Context, e *env, tuned bool) (peer, error) {
	pg, err := e.ensurePostgres(ctx)
	if err != nil {
		return peer{}, err
	}
	poll, cooldown := river.FetchPollIntervalDefault, river.FetchCooldownDefault
	name := "River"
	key := "river"
	if tuned {
		poll, cooldown, name, key = 5*time.Millisecond, time.Millisecond, "River, tuned", "river-tuned"
	}
	cfg := fmt.Sprintf("riverpgxv5, pgxpool of 40 connections, %d workers on one queue, FetchPollInterval %v, FetchCooldown %v; insert one job per timer (InsertMany in batches of 1000 for (d)); cancel = JobCancel",
		riverWorkers, poll, cooldown)
	return peer{
		name: name, config: cfg,
		open: func(ctx context.Context, fire func(int)) (timers, error) {
			return openRiver(ctx, pg, poll, cooldown, fire, 0, nil)
		},
		saga: func(ctx context.Context, d time.Duration, done func(int)) (sagas, error) {
			return openRiver(ctx, pg, poll, cooldown, nil, d, done)
		},
		servers: pg.processes,
		pending: []string{"-child", "pending", "-peer", key},
	}, nil
}

type timerArgs struct {
	ID int `json:"id"`
}

func (timerArgs) Kind() string { return "timer" }

type stepOneArgs struct {
	ID int `json:"id"`
}

func (stepOneArgs) Kind() string { return "step_one" }

type stepTwoArgs struct {
	ID int `json:"id"`
}

func (stepTwoArgs) Kind() string { return "step_two" }

type riverTimers struct {
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
	delay  time.Duration
}

// openRiver migrates a fresh database and starts a client whose workers
// handle timers (fire) and the saga's two steps (done).
func openRiver(ctx context.Context, pg *postgres, poll, cooldown time.Duration, fire func(int), delay time.Duration, done func(int)) (*riverTimers, error) {
	pool, driver, err := riverDatabase(ctx, pg, "river")
	if err != nil {
		return nil, err
	}
	t := &riverTimers{pool: pool, delay: delay}
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[timerArgs]) error {
		if fire != nil {
			fire(job.Args.ID)
		}
		return nil
	}))
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[stepOneArgs]) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if _, err := t.client.InsertTx(ctx, tx, stepTwoArgs(job.Args), &river.InsertOpts{ScheduledAt: time.Now().Add(t.delay)}); err != nil {
			return err
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}))
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[stepTwoArgs]) error {
		if done != nil {
			done(job.Args.ID)
		}
		return nil
	}))
	t.client, err = river.NewClient(driver, &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverWorkers}},
		Workers:           workers,
		FetchPollInterval: poll,
		FetchCooldown:     cooldown,
		Logger:            quietLogger(),
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	if err := t.client.Start(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return t, nil
}

// riverDatabase makes a fresh database named after name, a pool of 40
// connections on it and River's driver, with River's schema migrated.
func riverDatabase(ctx context.Context, pg *postgres, name string) (*pgxpool.Pool, *riverpgxv5.Driver, error) {
	url, err := pg.newDatabase(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, err
	}
	pcfg.MaxConns = 40
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, nil, err
	}
	driver := riverpgxv5.New(pool)
	m, err := rivermigrate.New(driver, nil)
	if err == nil {
		_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	}
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("migrating: %w", err)
	}
	return pool, driver, nil
}

func (t *riverTimers) schedule(ctx context.Context, id int, due time.Time) (any, error) {
	r, err := t.client.Insert(ctx, timerArgs{ID: id}, &river.InsertOpts{ScheduledAt: due})
	if err != nil {
		return nil, err
	}
	return r.Job.ID, nil
}

func (t *riverTimers) scheduleMany(ctx context.Context, ids []int, due time.Time) error {
	ps := make([]river.InsertManyParams, len(ids))
	for i, id := range ids {
		ps[i] = river.InsertManyParams{Args: timerArgs{ID: id}, InsertOpts: &river.InsertOpts{ScheduledAt: due}}
	}
	_, err := t.client.InsertMany(ctx, ps)
	return err
}

func (t *riverTimers) cancel(ctx context.Context, ref any) error {
	_, err := t.client.JobCancel(ctx, ref.(int64))
	return err
}

func (t *riverTimers) start(ctx context.Context, id int) error {
	_, err := t.client.Insert(ctx, stepOneArgs{ID: id}, nil)
	return err
}

func (t *riverTimers) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := t.client.Stop(ctx); err != nil {
		logf("river: stop: %v", err)
	}
	t.pool.Close()
}
