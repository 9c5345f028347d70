// Command demo charges orders through an HTTP payment service from three
// worker processes running the payment saga, and kills a worker (SIGKILL)
// every so often while they charge; the payment service also loses 5% of
// its answers after charging. Then it checks what the service charged:
// every order exactly once, and each order's Paid event carrying the
// service's charge.
//
//	go run ./examples/payment/demo                  # 300 orders
//	go run ./examples/payment/demo -orders 2000 -kill-every 200ms
//
// It starts an embedded nats-server (or uses -nats), the payment service
// on a loopback port, and the workers as copies of itself.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/examples/internal/demo"
	"github.com/jetsaga/jetsaga/examples/payment"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/transport"
)

// workerEnv, set in a worker process, holds the NATS URL and the payment
// service's URL, separated by a space.
const workerEnv = "JETSAGA_PAYMENT_DEMO_WORKER"

const (
	prefix = "payment-demo"
	bucket = "payment_demo"
)

// queueConfig is the saga's queue: a short lock, so that a killed
// worker's messages come back soon.
var queueConfig = transport.QueueConfig{Name: payment.Queue, LockDuration: 2 * time.Second}

func main() {
	if spec := os.Getenv(workerEnv); spec != "" {
		worker(spec)
		return
	}
	url := flag.String("nats", os.Getenv("NATS_URL"), "NATS server URL; empty starts an embedded nats-server")
	orders := flag.Int("orders", 300, "orders to charge")
	workers := flag.Int("workers", 3, "worker processes")
	killEvery := flag.Duration("kill-every", 500*time.Millisecond, "how often a worker is killed (SIGKILL) and started again")
	drop := flag.Float64("drop", 0.05, "share of the payment service's answers lost after it charged")
	flag.Parse()
	demo.Main("payment demo", func(ctx context.Context) error {
		_, err := run(ctx, os.Stdout, options{NATSURL: *url, Orders: *orders, Workers: *workers, KillEvery: *killEvery, Drop: *drop})
		return err
	})
}

type options struct {
	NATSURL   string
	Orders    int
	Workers   int
	KillEvery time.Duration
	Drop      float64
}

// result is what a run saw.
type result struct {
	Charged map[string]int // the service's charges by order
	Paid    map[string]payment.Charge
	Kills   int
	Dropped int
}

func run(ctx context.Context, out io.Writer, o options) (*result, error) {
	nc, closeNATS, err := demo.Connect(o.NATSURL, out)
	if err != nil {
		return nil, err
	}
	defer closeNATS()
	env, err := demo.Open(ctx, nc, demo.Config{Prefix: prefix, Bucket: bucket, Queues: []string{payment.Queue, payment.PaidQueue},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	defer func() { _ = env.Close(context.WithoutCancel(ctx)) }()

	provider := payment.NewProvider()
	provider.DropRate = o.Drop
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: provider, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	providerURL := "http://" + ln.Addr().String()
	fmt.Fprintf(out, "payment service at %s, losing %.0f%% of its answers after charging\n", providerURL, 100*o.Drop)

	// The sender: a dispatcher that only sends.
	sender, err := saga.NewDispatcher(env.Broker, env.Store, payment.Queue, saga.WithSagas(payment.Saga(http.DefaultClient, providerURL)),
		saga.WithQueueConfig(queueConfig))
	if err != nil {
		return nil, err
	}
	paidQ, err := env.Broker.OpenQueue(ctx, transport.QueueConfig{Name: payment.PaidQueue})
	if err != nil {
		return nil, err
	}

	spec := nc.ConnectedUrl() + " " + providerURL
	ws := make([]*exec.Cmd, o.Workers)
	start := func(i int) error {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), workerEnv+"="+spec)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("starting worker %d: %w", i, err)
		}
		ws[i] = cmd
		return nil
	}
	for i := range ws {
		if err := start(i); err != nil {
			return nil, err
		}
	}
	defer func() {
		for _, w := range ws {
			_ = w.Process.Signal(syscall.SIGTERM)
		}
		for _, w := range ws {
			_ = w.Wait()
		}
	}()
	fmt.Fprintf(out, "%d workers started; charging %d orders, one worker killed (SIGKILL) every %v\n", o.Workers, o.Orders, o.KillEvery)

	for i := range o.Orders {
		if _, err := sender.Send(ctx, payment.Checkout{Order: fmt.Sprintf("order-%04d", i), Amount: 100 + i}); err != nil {
			return nil, err
		}
	}

	res := &result{Paid: map[string]payment.Charge{}}
	var mu sync.Mutex
	paid := make(chan struct{})
	progress := make(chan int, 1) // orders paid so far, the latest
	go func() {                   // the Paid events
		defer close(paid)
		for ctx.Err() == nil {
			ds, err := paidQ.Receive(ctx, 100)
			if err != nil {
				continue
			}
			for _, d := range ds {
				var p payment.Paid
				if err := json.Unmarshal(d.Body, &p); err == nil {
					mu.Lock()
					res.Paid[p.Order] = p.Charge
					n := len(res.Paid)
					mu.Unlock()
					select {
					case <-progress:
					default:
					}
					progress <- n
					if n == o.Orders {
						_ = d.Complete(ctx)
						return
					}
				}
				_ = d.Complete(ctx)
			}
		}
	}()
	kill := time.NewTicker(o.KillEvery)
	defer kill.Stop()
	killOne := func() error {
		i := rand.IntN(len(ws))
		_ = ws[i].Process.Kill()
		_ = ws[i].Wait()
		res.Kills++
		return start(i)
	}
	// Besides the ticker, a kill at each fifth of the orders paid: a fast
	// machine kills mid-run too.
	next := o.Orders / 5
	deadline := time.After(5*time.Minute + time.Duration(o.Orders)*100*time.Millisecond)
wait:
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline:
			mu.Lock()
			n := len(res.Paid)
			mu.Unlock()
			return nil, fmt.Errorf("%d of %d orders paid before the deadline", n, o.Orders)
		case <-paid:
			break wait
		case <-kill.C:
			if err := killOne(); err != nil {
				return nil, err
			}
		case n := <-progress:
			if n >= next && n < o.Orders {
				next += o.Orders / 5
				if err := killOne(); err != nil {
					return nil, err
				}
			}
		}
	}
	res.Charged, res.Dropped = provider.Charges(), provider.Dropped()
	twice := 0
	var errs []error
	for i := range o.Orders {
		order := fmt.Sprintf("order-%04d", i)
		ch, _ := provider.ChargeOf(order)
		switch n := res.Charged[order]; {
		case n > 1:
			twice++
			errs = append(errs, fmt.Errorf("%w: %s charged %d times", payment.ErrDoubleCharge, order, n))
		case n == 0:
			errs = append(errs, fmt.Errorf("%s paid but never charged", order))
		case res.Paid[order] != ch:
			errs = append(errs, fmt.Errorf("%s: Paid carries %+v, the service charged %+v", order, res.Paid[order], ch))
		}
	}
	fmt.Fprintf(out, "%d orders paid; the service charged %d orders, %d more than once; %d workers killed, %d answers lost after a charge\n",
		len(res.Paid), len(res.Charged), twice, res.Kills, res.Dropped)
	return res, errors.Join(errs...)
}

// worker runs the payment saga until SIGTERM (or SIGKILL).
func worker(spec string) {
	natsURL, providerURL, _ := strings.Cut(spec, " ")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	nc, err := nats.Connect(natsURL, transport.ReconnectForever(logger))
	if err != nil {
		fail(err)
	}
	defer nc.Close()
	broker, err := transport.NewJetStream(nc, transport.WithPrefix(prefix), transport.WithLogger(logger))
	if err != nil {
		fail(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		fail(err)
	}
	store, err := kvstore.New(ctx, js, kvstore.Config{Bucket: bucket})
	if err != nil {
		fail(err)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	d, err := saga.NewDispatcher(broker, store, payment.Queue, saga.WithSagas(payment.Saga(client, providerURL)), saga.WithLogger(logger),
		// Retries soon, for a demo: the answers the service loses come back quickly.
		saga.WithRetry(saga.RetryPolicy{Immediate: 1, Delayed: 20, Backoff: func(int) time.Duration { return 200 * time.Millisecond }}),
		saga.WithQueueConfig(queueConfig))
	if err != nil {
		fail(err)
	}
	if err := d.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "payment demo worker:", err)
	os.Exit(1)
}
