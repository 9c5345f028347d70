// Command demo plays the invoice-reminder saga of package tenants with one
// noisy tenant — its reminders all due at one instant — and ten quiet
// ones due at the same instant, first on the default layout (a queue of
// one partition) and then on the fair layout (tenants.Fair: 11 partitions
// by tenant, 4 steps of a tenant at once), and prints how late each
// tenant's reminder e-mails were and when the noisy tenant's burst was
// drained.
//
//	go run ./examples/tenants/demo                 # 20,000 noisy reminders
//	go run ./examples/tenants/demo -noisy 100000 -partitions 32
//
// On the default layout the quiet tenants' reminders wait behind the
// whole burst; on the fair layout they are sent while it drains, except a
// quiet tenant whose key hashes to the noisy tenant's partition (FNV-1a
// of the key, modulo the partitions): the demo says which.
package main

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jetsaga/jetsaga/examples/internal/demo"
	"github.com/jetsaga/jetsaga/examples/tenants"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

func main() {
	url := flag.String("nats", os.Getenv("NATS_URL"), "NATS server URL; empty starts an embedded nats-server")
	noisy := flag.Int("noisy", 20000, "the noisy tenant's reminders, all due at one instant")
	quiet := flag.Int("quiet", 10, "the quiet tenants")
	each := flag.Int("each", 10, "each quiet tenant's reminders, due at the same instant")
	partitions := flag.Int("partitions", tenants.Fair.Partitions, "the fair layout's partitions")
	keyLimit := flag.Int("keylimit", tenants.Fair.KeyLimit, "the fair layout's key limit")
	noEarly := flag.Bool("no-early", false, "turn the timeout engine's early activation off")
	flag.Parse()
	o := options{NATSURL: *url, Noisy: *noisy, Quiet: *quiet, Each: *each,
		Fair: tenants.Layout{Partitions: *partitions, KeyLimit: *keyLimit}, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), NoEarlyActivation: *noEarly}
	demo.Main("tenants demo", func(ctx context.Context) error {
		_, err := run(ctx, os.Stdout, o)
		return err
	})
}

// options are the demo's settings.
type options struct {
	NATSURL            string // default: an embedded nats-server
	Noisy, Quiet, Each int
	Fair               tenants.Layout
	Logger             *slog.Logger
	// NoEarlyActivation turns the timeout engine's early activation off
	// (timeout.WithEarlyActivation(0)): timeouts then reach the queue in
	// the order the server activates them, which the test relies on.
	NoEarlyActivation bool
}

// outcome is one layout's run.
type outcome struct {
	Layout tenants.Layout
	// Drain is when the noisy tenant's last e-mail arrived, after the
	// due instant.
	Drain time.Duration
	// Late is each tenant's e-mails' lateness (arrival − due), in
	// arrival order; Order the tenants of all e-mails in arrival order.
	Late  map[string][]time.Duration
	Order []string
	// Twice counts e-mails that arrived more than once.
	Twice int
}

const (
	noisyTenant = "noisy"
	queueName   = "invoices"
	emailsQueue = "emails"
)

// quietTenant names the i-th quiet tenant.
func quietTenant(i int) string { return fmt.Sprintf("quiet-%02d", i) }

// partitionOf is the partition a key picks among n, by the transport's
// documented rule (FNV-1a of the key, modulo n).
func partitionOf(key string, n int) int {
	h := fnv.New64a()
	h.Write([]byte(key))
	return int(h.Sum64() % uint64(n))
}

func run(ctx context.Context, out io.Writer, o options) ([]outcome, error) {
	if o.Noisy < 1 || o.Quiet < 1 || o.Each < 1 {
		return nil, fmt.Errorf("noisy %d, quiet %d, each %d: want at least 1 of each", o.Noisy, o.Quiet, o.Each)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	nc, closeNATS, err := demo.Connect(o.NATSURL, out)
	if err != nil {
		return nil, err
	}
	defer closeNATS()
	fmt.Fprintf(out, "tenant %s: %d reminders due at one instant; %d quiet tenants: %d each, due at the same instant\n",
		noisyTenant, o.Noisy, o.Quiet, o.Each)
	var outs []outcome
	for i, l := range []tenants.Layout{{Partitions: 1}, o.Fair} {
		env, err := demo.Open(ctx, nc, demo.Config{Prefix: fmt.Sprintf("TENANTS_DEMO%d", i), Bucket: fmt.Sprintf("tenants_demo%d", i),
			Queues: []string{queueName, emailsQueue}, Logger: o.Logger})
		if err != nil {
			return nil, err
		}
		res, err := play(ctx, env, l, o)
		if cerr := env.Close(context.WithoutCancel(ctx)); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		report(out, res, o)
		outs = append(outs, res)
	}
	return outs, nil
}

// play runs one layout: issues the invoices, waits for every e-mail.
func play(ctx context.Context, env *demo.Env, l tenants.Layout, o options) (outcome, error) {
	opts, err := tenants.Options(queueName, l)
	if err != nil {
		return outcome{}, err
	}
	opts = append(opts, saga.WithSagas(tenants.New(emailsQueue)), saga.WithLogger(o.Logger), saga.WithConcurrency(16))
	if o.NoEarlyActivation {
		opts = append(opts, saga.WithTimeouts(timeout.NewQueue(env.Broker, timeout.WithEarlyActivation(0))))
	}
	d, err := saga.NewDispatcher(env.Broker, env.Store, queueName, opts...)
	if err != nil {
		return outcome{}, err
	}
	if err := d.Open(ctx); err != nil {
		return outcome{}, err
	}
	emails, err := env.Broker.OpenQueue(ctx, transport.QueueConfig{Name: emailsQueue})
	if err != nil {
		return outcome{}, err
	}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = d.Run(rctx) })
	defer func() { stop(); wg.Wait() }()

	// Issue everything first (the sagas only request their timeouts),
	// all due at one instant well after the last issue.
	due := 2*time.Second + time.Duration(o.Noisy+o.Quiet*o.Each)*200*time.Microsecond
	start := time.Now()
	issue := func(tenant string, n int) error {
		for i := range n {
			_, err := d.Send(ctx, tenants.InvoiceIssued{Tenant: tenant, Invoice: fmt.Sprintf("inv-%06d", i), Due: due - time.Since(start)},
				saga.WithMessageID(tenants.ID(tenant, fmt.Sprintf("inv-%06d", i))))
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := issue(noisyTenant, o.Noisy); err != nil {
		return outcome{}, err
	}
	for q := range o.Quiet {
		if err := issue(quietTenant(q), o.Each); err != nil {
			return outcome{}, err
		}
	}

	res := outcome{Layout: l, Late: map[string][]time.Duration{}}
	seen := map[string]bool{}
	total := o.Noisy + o.Quiet*o.Each
	dueAt := start.Add(due)
	wait, cancel := context.WithTimeout(ctx, due+time.Duration(total)*time.Millisecond+time.Minute)
	defer cancel()
	for len(seen) < total {
		ds, err := emails.Receive(wait, 256)
		if err != nil {
			return outcome{}, fmt.Errorf("%d of %d reminder e-mails: %w", len(seen), total, err)
		}
		now := time.Now()
		for _, del := range ds {
			m, err := saga.Decode[tenants.ReminderEmail](del.Message)
			if err != nil {
				return outcome{}, err
			}
			if id := tenants.ID(m.Tenant, m.Invoice); seen[id] {
				res.Twice++
			} else {
				seen[id] = true
				res.Late[m.Tenant] = append(res.Late[m.Tenant], now.Sub(m.DueAt))
				res.Order = append(res.Order, m.Tenant)
				if m.Tenant == noisyTenant {
					res.Drain = now.Sub(dueAt)
				}
			}
			if err := del.Complete(wait); err != nil {
				return outcome{}, err
			}
		}
	}
	stop()
	wg.Wait()
	return res, runErr
}

// report prints a layout's outcome: the noisy tenant's drain, and each
// quiet tenant's lateness.
func report(out io.Writer, r outcome, o options) {
	name := "default layout (1 partition)"
	if r.Layout.Partitions > 1 {
		name = fmt.Sprintf("fair layout (%d partitions by tenant, %d steps of a tenant at once)", r.Layout.Partitions, r.Layout.KeyLimit)
	}
	fmt.Fprintf(out, "\n%s: %s's burst drained %v after its due time\n", name, noisyTenant, r.Drain.Round(time.Millisecond))
	noisyPart := partitionOf(noisyTenant, r.Layout.Partitions)
	for q := range o.Quiet {
		t := quietTenant(q)
		late := slices.Clone(r.Late[t])
		slices.Sort(late)
		shared := ""
		if r.Layout.Partitions > 1 && partitionOf(t, r.Layout.Partitions) == noisyPart {
			shared = fmt.Sprintf("  (shares %s's partition)", noisyTenant)
		}
		fmt.Fprintf(out, "  %s  reminders late p50 %8v  max %8v%s\n", t,
			late[len(late)/2].Round(time.Millisecond), late[len(late)-1].Round(time.Millisecond), shared)
	}
	if r.Twice > 0 {
		fmt.Fprintf(out, "  %d e-mails arrived twice\n", r.Twice)
	}
}
