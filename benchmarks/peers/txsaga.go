package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/saga/pgstore"
	"github.com/jetsaga/jetsaga/transport"
)

// Workload (e), issue 33: a two-step saga/workflow whose steps each write
// business rows in the same PostgreSQL transaction as the framework's
// checkpoint, on one PostgreSQL server:
//
//   - step one inserts an order and debits an account
//     (INSERT INTO tx_orders, UPDATE tx_accounts);
//   - step two confirms the order (UPDATE tx_orders) and ends the instance.
//
// jetsaga runs it as a saga on pgstore (the handler writes through
// pgstore.Tx(ctx)), optimistic and WithLocking, started by a message, its
// second step by a second message the first step sends (-tx-second
// timeout: by a timeout due at once); DBOS runs it as a workflow of two
// dbos.RunAsTransaction steps on a DataSource over the system database's
// own pool (DBOS then writes the step's checkpoint in the step's
// transaction). kvstore, the default store, runs the same two
// steps without the business writes: the baseline row. The systems run
// in interleaved rounds, a fresh database each, and each run is checked:
// every order confirmed, the balances their sum.

// txBusiness is the business tables, created in each run's database.
const txBusiness = `
CREATE TABLE tx_accounts (id int PRIMARY KEY, balance bigint NOT NULL);
INSERT INTO tx_accounts SELECT g, 0 FROM generate_series(0, 999) g;
CREATE TABLE tx_orders (id bigint PRIMARY KEY, account int NOT NULL, amount bigint NOT NULL, state text NOT NULL);`

// txAccounts is how many accounts the orders spread over.
const txAccounts = 1000

func txAmount(id int) int64 { return int64(id%97 + 1) }

// txExec is what both systems' transactions offer (pgx.Tx, dbos.Tx).
type txExec[R any] interface {
	Exec(ctx context.Context, sql string, args ...any) (R, error)
}

// txPlace is step one's business write.
func txPlace[R any](ctx context.Context, tx txExec[R], id int) error {
	if _, err := tx.Exec(ctx, "INSERT INTO tx_orders (id, account, amount, state) VALUES ($1, $2, $3, 'placed')", id, id%txAccounts, txAmount(id)); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, "UPDATE tx_accounts SET balance = balance - $2 WHERE id = $1", id%txAccounts, txAmount(id))
	return err
}

// txConfirm is step two's.
func txConfirm[R any](ctx context.Context, tx txExec[R], id int) error {
	_, err := tx.Exec(ctx, "UPDATE tx_orders SET state = 'confirmed' WHERE id = $1 AND state = 'placed'", id)
	return err
}

// txCheck verifies a run's business rows: n orders, all confirmed, and
// the balances their sum.
func txCheck(ctx context.Context, pool *pgxpool.Pool, n int) error {
	var orders, confirmed, amounts, balances int64
	err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM tx_orders), (SELECT count(*) FROM tx_orders WHERE state = 'confirmed'),
		(SELECT coalesce(sum(amount), 0) FROM tx_orders), (SELECT coalesce(-sum(balance), 0) FROM tx_accounts)`).Scan(&orders, &confirmed, &amounts, &balances)
	if err != nil {
		return err
	}
	if orders != int64(n) || confirmed != int64(n) || amounts != balances {
		return fmt.Errorf("business rows wrong after %d instances: %d orders, %d confirmed, amounts %d, debits %d", n, orders, confirmed, amounts, balances)
	}
	return nil
}

// A txSystem is one row of workload (e): a system at a pool size.
type txSystem struct {
	key, name, config string
	pool              int
	// open makes a fresh saga (and database) for one round.
	open func(ctx context.Context, done func(id int)) (txRun, error)
	pg   bool // runs on PostgreSQL: its processes count in CPU per step
}

// txRun is a system set up for one round.
type txRun interface {
	sagas
	// check verifies the business rows once n instances completed.
	check(ctx context.Context, n int) error
	// counts is what its pool sent PostgreSQL (nil on kvstore).
	counts() *pgCount
}

// txSystems are the rows at pool size n (connections; the jetsaga
// dispatcher's concurrency is its default, 8, or n if larger, unless
// -tx-concurrency says), in the order of the first round; cfg.only
// keeps the jetsaga rows with "jetsaga" and DBOS's with "dbos-pg".
func txSystems(e *env, n int) []txSystem {
	viaTimeout := e.cfg.txSecond == "timeout"
	second := "step two by a message step one sends (c.Send, after the commit)"
	if viaTimeout {
		second = "step two by a timeout step one requests, due at once (c.RequestTimeout(0, ...))"
	}
	var out []txSystem
	if len(e.cfg.only) == 0 || slices.Contains(e.cfg.only, "jetsaga") {
		out = append(out,
			txSystem{key: "kvstore", name: "jetsaga, kvstore (no business write)",
				config: "saga.Dispatcher on kvstore (the default store), the same two steps without business rows: the baseline; " + second,
				open: func(ctx context.Context, done func(int)) (txRun, error) {
					return openTxJetsaga(ctx, e, done, "", n, viaTimeout)
				}},
			txSystem{key: "pgstore", name: "jetsaga, pgstore", pg: true,
				config: "saga.Dispatcher on pgstore (the step's transaction; optimistic revisions), a pgxpool of pool connections; the handler writes through pgstore.Tx(ctx); " + second,
				open: func(ctx context.Context, done func(int)) (txRun, error) {
					return openTxJetsaga(ctx, e, done, "optimistic", n, viaTimeout)
				}},
			txSystem{key: "pgstore-locking", name: "jetsaga, pgstore WithLocking", pg: true,
				config: "as above, pgstore.WithLocking() (the step's load is SELECT ... FOR UPDATE)",
				open: func(ctx context.Context, done func(int)) (txRun, error) {
					return openTxJetsaga(ctx, e, done, "locking", n, viaTimeout)
				}})
	}
	if len(e.cfg.only) == 0 || slices.Contains(e.cfg.only, "dbos-pg") {
		out = append(out, txSystem{key: "dbos", name: "DBOS, PostgreSQL", pg: true,
			config: "DBOS Transact Go, Config.SystemDBPool a pgxpool of pool connections, a DataSource on that same pool (NewDataSource: DBOS then writes the step's checkpoint in the step's transaction); a workflow (RunWorkflow with a workflow ID) of two dbos.RunAsTransaction steps, started in the bench process",
			open: func(ctx context.Context, done func(int)) (txRun, error) {
				return openTxDBOS(ctx, e, done, n)
			}})
	}
	for i := range out {
		out[i].pool = n
	}
	return out
}

// txResult is one system's rounds at one pool size.
type txResult struct {
	Key, Name, Config string
	Pool              int
	Rounds            []sagaResult
	Err               string
}

// median is the median round's steps/s and CPU per step (each its own
// median).
func (r txResult) median() (stepsPerS float64, cpu time.Duration) {
	if len(r.Rounds) == 0 {
		return 0, 0
	}
	var s []float64
	var c []time.Duration
	for _, x := range r.Rounds {
		s = append(s, x.StepsPerS)
		c = append(c, x.CPUPer)
	}
	slices.Sort(s)
	slices.Sort(c)
	return s[len(s)/2], c[len(c)/2]
}

// serverCPU is the median round's CPU per step of PostgreSQL's processes.
func (r txResult) serverCPU() time.Duration {
	if len(r.Rounds) == 0 {
		return 0
	}
	var c []time.Duration
	for _, x := range r.Rounds {
		c = append(c, x.ServerCPUPer)
	}
	slices.Sort(c)
	return c[len(c)/2]
}

// sql is the statements and round trips per step to PostgreSQL, over
// every round (0 on kvstore).
func (r txResult) sql() (stmts, trips float64) {
	steps := 0.0
	for _, x := range r.Rounds {
		n := float64(2 * x.Instances)
		stmts, trips, steps = stmts+x.Stmts*n, trips+x.Trips*n, steps+n
	}
	if steps == 0 {
		return 0, 0
	}
	return stmts / steps, trips / steps
}

// runTx runs workload (e): cfg.txRounds rounds, each running every system
// at every pool size of cfg.txPools in turn (the order rotated each
// round), each for cfg.txTime with cfg.txWindow instances in flight.
func runTx(ctx context.Context, cfg config, e *env) ([]txResult, error) {
	var systems []txSystem
	for _, n := range cfg.txPools {
		systems = append(systems, txSystems(e, n)...)
	}
	if len(systems) == 0 {
		return nil, nil // -only left none of them
	}
	var pgProcs func() []int
	for _, s := range systems {
		if s.pg {
			pg, err := e.ensurePostgres(ctx)
			if err != nil {
				return nil, err
			}
			pgProcs = pg.processes
			break
		}
	}
	res := make([]txResult, len(systems))
	for i, s := range systems {
		res[i] = txResult{Key: s.key, Name: s.name, Config: s.config, Pool: s.pool}
	}
	run := cfg
	run.sagaTime, run.sagaWindow = cfg.txTime, cfg.txWindow
	for round := range cfg.txRounds {
		for k := range systems {
			i := (k + round) % len(systems)
			s := systems[i]
			if res[i].Err != "" {
				continue
			}
			logf("(e) round %d: %s, pool %d, %d in flight for %v", round+1, s.name, s.pool, cfg.txWindow, cfg.txTime)
			var r txRun
			var stmts0, trips0 int64
			p := peer{name: s.name, saga: func(ctx context.Context, _ time.Duration, done func(int)) (sagas, error) {
				var err error
				if r, err = s.open(ctx, done); err != nil {
					r = nil // a nil *txJetsaga is not a nil txRun
					return nil, err
				}
				stmts0, trips0 = r.counts().snapshot() // set up: not counted
				return keepOpen{r}, nil                // closed below, after the check
			}}
			if s.pg {
				p.servers = pgProcs
			}
			sr, err := runSaga(ctx, run, p)
			if err == nil {
				stmts, trips := r.counts().snapshot()
				steps := float64(max(2*sr.Instances, 1))
				sr.Stmts, sr.Trips = float64(stmts-stmts0)/steps, float64(trips-trips0)/steps
				err = r.check(ctx, sr.Instances)
			}
			if r != nil {
				r.close()
			}
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			if err != nil {
				logf("(e) %s, pool %d: %v", s.name, s.pool, err)
				res[i].Err = err.Error()
				continue
			}
			res[i].Rounds = append(res[i].Rounds, sr)
		}
	}
	return res, nil
}

// keepOpen leaves closing to runTx, which checks the rows first.
type keepOpen struct{ txRun }

func (keepOpen) close() {}

// The jetsaga side.

type txStartMsg struct {
	ID int `json:"id"`
}

func (txStartMsg) MessageName() string { return "peers.TxStart" }

type txConfirmMsg struct {
	ID int `json:"id"`
}

func (txConfirmMsg) MessageName() string { return "peers.TxConfirm" }

type txConfirmTimeout struct{}

func (txConfirmTimeout) MessageName() string { return "peers.TxConfirmTimeout" }

type txData struct {
	ID int `json:"id"`
}

var errNoTx = errors.New("peers: the step has no pgstore transaction")

type txJetsaga struct {
	*jetSaga
	pool  *pgxpool.Pool // nil on kvstore
	count *pgCount      // the pool's
}

// openTxJetsaga starts a dispatcher of the two-step saga on a fresh
// kvstore bucket (mode "") or a fresh database with pgstore (mode
// "optimistic" or "locking").
func openTxJetsaga(ctx context.Context, e *env, done func(int), mode string, pool int, viaTimeout bool) (*txJetsaga, error) {
	nc, err := e.natsConnect()
	if err != nil {
		return nil, err
	}
	k := jetSeq.Add(1)
	s := &txJetsaga{jetSaga: &jetSaga{nc: nc, queue: fmt.Sprintf("txsaga-%d", k), ran: make(chan error, 1)}}
	fail := func(err error) (*txJetsaga, error) {
		s.close()
		return nil, err
	}
	if s.b, err = transport.NewJetStream(nc, transport.WithPrefix("PEERS"), transport.WithLogger(quietLogger())); err != nil {
		nc.Close()
		return nil, err
	}
	var store saga.Store
	if mode == "" {
		if s.js, err = jetstream.New(nc); err != nil {
			return fail(err)
		}
		s.kv = fmt.Sprintf("peers_txsaga_%d", k)
		if store, err = kvstore.New(ctx, s.js, kvstore.Config{Bucket: s.kv}); err != nil {
			return fail(err)
		}
	} else {
		s.count = new(pgCount)
		if s.pool, err = txPool(ctx, e, "jetsaga", pool, s.count); err != nil {
			return fail(err)
		}
		if err := pgstore.Migrate(ctx, s.pool); err != nil {
			return fail(err)
		}
		var opts []pgstore.Option
		if mode == "locking" {
			opts = append(opts, pgstore.WithLocking())
		}
		if store, err = pgstore.New(ctx, s.pool, opts...); err != nil {
			return fail(err)
		}
	}
	write := mode != ""
	def := saga.Define[txData]("txsaga")
	saga.StartedBy(def, saga.By(func(m txStartMsg) string { return strconv.Itoa(m.ID) }),
		func(ctx context.Context, c *saga.Context[txData], m txStartMsg) error {
			c.Data.ID = m.ID
			if write {
				tx, ok := pgstore.Tx(ctx)
				if !ok {
					return saga.Permanent(errNoTx)
				}
				if err := txPlace(ctx, tx, m.ID); err != nil {
					return err
				}
			}
			if viaTimeout {
				_, err := c.RequestTimeout(0, txConfirmTimeout{})
				return err
			}
			return c.Send(s.queue, txConfirmMsg(m))
		})
	confirm := func(ctx context.Context, c *saga.Context[txData]) error {
		if write {
			tx, ok := pgstore.Tx(ctx)
			if !ok {
				return saga.Permanent(errNoTx)
			}
			if err := txConfirm(ctx, tx, c.Data.ID); err != nil {
				return err
			}
		}
		c.MarkComplete()
		return nil
	}
	saga.Handles(def, saga.By(func(m txConfirmMsg) string { return strconv.Itoa(m.ID) }),
		func(ctx context.Context, c *saga.Context[txData], _ txConfirmMsg) error { return confirm(ctx, c) })
	saga.OnTimeout(def, func(ctx context.Context, c *saga.Context[txData], _ txConfirmTimeout) error { return confirm(ctx, c) })
	// An instance is done once its second step committed and its message
	// was settled.
	hooks := saga.Hooks{StepDone: func(_ context.Context, info saga.StepInfo, r saga.StepResult) {
		switch {
		case r.Outcome != saga.Handled:
			logf("(e) jetsaga %s step %s/%s: %s: %v", cmp.Or(mode, "kvstore"), info.MessageType, info.ID, r.Outcome, r.Err)
		case info.MessageType == txConfirmMsg{}.MessageName() || info.MessageType == txConfirmTimeout{}.MessageName():
			id, _ := strconv.Atoi(info.ID)
			done(id)
		}
	}}
	if s.d, err = saga.NewDispatcher(s.b, store, s.queue, saga.WithSagas(def), saga.WithLogger(quietLogger()),
		saga.WithConcurrency(cmp.Or(e.cfg.txConcurrency, max(8, pool))), saga.WithHooks(hooks)); err != nil {
		return fail(err)
	}
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stop = stop
	go func() { s.ran <- s.d.Run(rctx) }()
	return s, nil
}

func (s *txJetsaga) start(ctx context.Context, id int) error {
	_, err := s.d.Send(ctx, txStartMsg{ID: id})
	return err
}

func (s *txJetsaga) check(ctx context.Context, n int) error {
	if s.pool == nil {
		return nil
	}
	return txCheck(ctx, s.pool, n)
}

func (s *txJetsaga) counts() *pgCount { return s.count }

func (s *txJetsaga) close() {
	s.jetSaga.close()
	if s.pool != nil {
		logPoolStat("jetsaga", s.pool)
		s.pool.Close()
	}
}

// logPoolStat logs how often a round's steps waited for a connection of
// the pool, and for how long in all.
func logPoolStat(system string, pool *pgxpool.Pool) {
	st := pool.Stat()
	logf("(e) %s pool of %d: %d acquires, %d waited for a connection, %v waited in all",
		system, st.MaxConns(), st.AcquireCount(), st.EmptyAcquireCount(), st.EmptyAcquireWaitTime().Round(time.Millisecond))
}

// txPool makes a fresh database with the business tables and a pool of n
// connections on it, which count tells what it sends.
func txPool(ctx context.Context, e *env, prefix string, n int, count *pgCount) (*pgxpool.Pool, error) {
	url, err := e.pg.newDatabase(ctx, "tx"+prefix)
	if err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	pc.MaxConns = int32(n)
	pc.ConnConfig.Tracer = count
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, txBusiness); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// The DBOS side.

type txDBOS struct {
	ctx   dbos.Context
	pool  *pgxpool.Pool
	count *pgCount
	wf    dbos.Workflow[int, int]
	pre   string
}

func openTxDBOS(ctx context.Context, e *env, done func(int), n int) (*txDBOS, error) {
	count := new(pgCount)
	pool, err := txPool(ctx, e, "dbos", n, count)
	if err != nil {
		return nil, err
	}
	dctx, err := dbos.NewContext(context.WithoutCancel(ctx), dbos.Config{AppName: "jetsaga-peers", SystemDBPool: pool, Logger: quietLogger()})
	if err != nil {
		pool.Close()
		return nil, err
	}
	t := &txDBOS{ctx: dctx, pool: pool, count: count, pre: fmt.Sprintf("tx%d-", dbosSeq.Add(1))}
	ds, err := dbos.NewDataSource(dctx, pool, dbos.WithDataSourceName("business"))
	if err != nil {
		t.close()
		return nil, err
	}
	t.wf = func(ctx dbos.Context, id int) (int, error) {
		if _, err := dbos.RunAsTransaction(ctx, ds, func(ctx context.Context, tx dbos.Tx) (int, error) {
			return id, txPlace(ctx, tx, id)
		}); err != nil {
			return 0, err
		}
		if _, err := dbos.RunAsTransaction(ctx, ds, func(ctx context.Context, tx dbos.Tx) (int, error) {
			return id, txConfirm(ctx, tx, id)
		}); err != nil {
			return 0, err
		}
		done(id) // once the second step committed
		return id, nil
	}
	dbos.RegisterWorkflow(dctx, t.wf, dbos.WithWorkflowName("txsaga"))
	if err := dbos.Launch(dctx); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

func (t *txDBOS) start(_ context.Context, id int) error {
	_, err := dbos.RunWorkflow(t.ctx, t.wf, id, dbos.WithWorkflowID(t.pre+strconv.Itoa(id)))
	return err
}

func (t *txDBOS) counts() *pgCount { return t.count }

func (t *txDBOS) check(ctx context.Context, n int) error { return txCheck(ctx, t.pool, n) }

func (t *txDBOS) close() {
	if err := dbos.Shutdown(t.ctx, 5*time.Second); err != nil {
		logf("dbos: shutdown: %v", err)
	}
	logPoolStat("dbos", t.pool)
	t.pool.Close()
}
