package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	_ "github.com/dbos-inc/dbos-transact-golang/dbos/driver/sqlite" // DBOS's SQLite system database
)

// DBOS Transact Go: a timer is a workflow that calls dbos.Sleep until its
// due time (a checkpointed deadline, then a goroutine on a Go timer) and
// then runs its handler; cancel is CancelWorkflow. The saga is a workflow
// of a step, a durable Sleep and a step. On PostgreSQL (a fresh database
// per workload) or on SQLite (a fresh file in a temporary directory).

var dbosSeq atomic.Int64

func dbosPeer(ctx context.Context, e *env, sqlite bool) (peer, error) {
	p := peer{
		name:    "DBOS, PostgreSQL",
		config:  "system database on PostgreSQL, default Config; one workflow per timer (RunWorkflow with a workflow ID, dbos.Sleep to the due time); cancel = CancelWorkflow; saga = RunAsStep, Sleep, RunAsStep",
		pending: []string{"-child", "pending", "-peer", "dbos-pg"},
	}
	var newURL func(ctx context.Context) (string, error)
	if sqlite {
		p.name = "DBOS, SQLite"
		p.config = "system database on SQLite (a file; DBOS's driver on modernc.org/sqlite), default Config; workflows as on PostgreSQL"
		p.pending = []string{"-child", "pending", "-peer", "dbos-sqlite"}
		newURL = func(context.Context) (string, error) {
			dir, err := os.MkdirTemp("", "jetsaga-peers-dbos-*")
			if err != nil {
				return "", err
			}
			return "sqlite:" + filepath.Join(dir, "dbos.db"), nil
		}
	} else {
		pg, err := e.ensurePostgres(ctx)
		if err != nil {
			return peer{}, err
		}
		p.servers = pg.processes
		newURL = func(ctx context.Context) (string, error) { return pg.newDatabase(ctx, "dbos") }
	}
	p.open = func(ctx context.Context, fire func(int)) (timers, error) {
		url, err := newURL(ctx)
		if err != nil {
			return nil, err
		}
		return openDBOS(ctx, url, fire, 0, nil)
	}
	p.saga = func(ctx context.Context, d time.Duration, done func(int)) (sagas, error) {
		url, err := newURL(ctx)
		if err != nil {
			return nil, err
		}
		return openDBOS(ctx, url, nil, d, done)
	}
	return p, nil
}

type timerInput struct {
	ID  int       `json:"id"`
	Due time.Time `json:"due"`
}

type dbosTimers struct {
	ctx    dbos.Context
	url    string
	prefix string
	timer  dbos.Workflow[timerInput, int]
	saga   dbos.Workflow[int, int]
}

func openDBOS(ctx context.Context, url string, fire func(int), delay time.Duration, done func(int)) (*dbosTimers, error) {
	dctx, err := dbos.NewContext(context.WithoutCancel(ctx), dbos.Config{AppName: "jetsaga-peers", DatabaseURL: url, Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	t := &dbosTimers{ctx: dctx, url: url, prefix: fmt.Sprintf("w%d-", dbosSeq.Add(1))}
	t.timer = func(ctx dbos.Context, in timerInput) (int, error) {
		if _, err := dbos.Sleep(ctx, time.Until(in.Due)); err != nil {
			return 0, err
		}
		if fire != nil {
			fire(in.ID)
		}
		return in.ID, nil
	}
	t.saga = func(ctx dbos.Context, id int) (int, error) {
		if _, err := dbos.RunAsStep(ctx, func(context.Context) (int, error) { return id, nil }, dbos.WithStepName("one")); err != nil {
			return 0, err
		}
		if _, err := dbos.Sleep(ctx, delay); err != nil {
			return 0, err
		}
		return dbos.RunAsStep(ctx, func(context.Context) (int, error) {
			if done != nil {
				done(id)
			}
			return id, nil
		}, dbos.WithStepName("two"))
	}
	dbos.RegisterWorkflow(dctx, t.timer, dbos.WithWorkflowName("timer"))
	dbos.RegisterWorkflow(dctx, t.saga, dbos.WithWorkflowName("saga"))
	if err := dbos.Launch(dctx); err != nil {
		dbos.Shutdown(dctx, 5*time.Second)
		return nil, err
	}
	return t, nil
}

func (t *dbosTimers) schedule(_ context.Context, id int, due time.Time) (any, error) {
	wid := fmt.Sprintf("%st%d", t.prefix, id)
	_, err := dbos.RunWorkflow(t.ctx, t.timer, timerInput{ID: id, Due: due}, dbos.WithWorkflowID(wid))
	return wid, err
}

func (t *dbosTimers) cancel(_ context.Context, ref any) error {
	return dbos.CancelWorkflow(t.ctx, ref.(string))
}

func (t *dbosTimers) start(_ context.Context, id int) error {
	_, err := dbos.RunWorkflow(t.ctx, t.saga, id, dbos.WithWorkflowID(fmt.Sprintf("%ss%d", t.prefix, id)))
	return err
}

func (t *dbosTimers) close() {
	if err := dbos.Shutdown(t.ctx, 5*time.Second); err != nil {
		logf("dbos: shutdown: %v", err)
	}
	if dir, ok := cutSQLite(t.url); ok {
		os.RemoveAll(dir)
	}
}

func cutSQLite(url string) (dir string, ok bool) {
	if len(url) > 7 && url[:7] == "sqlite:" {
		return filepath.Dir(url[7:]), true
	}
	return "", false
}
