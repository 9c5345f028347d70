package saga_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// R18 on a real server: worker processes correlating starts by a unique
// index (saga.ByIndex) while they are killed (SIGKILL) at random points.

const (
	ixKillWorkerEnv = "JETSAGA_IXKILL_WORKER" // the NATS URL; set only in worker processes
	ixKillQueue     = "ixkill"
)

type ixKillData struct {
	Payment   string
	Checkouts int
}

// IxKillCheckout starts (or reaches) the order of its payment.
type IxKillCheckout struct{ Payment string }

func (IxKillCheckout) MessageName() string { return "ixkill.Checkout" }

func ixKillSaga() *saga.Definition[ixKillData] {
	def := saga.Define[ixKillData]("ixkill")
	saga.Index(def, "payment", func(d ixKillData) string { return d.Payment }, saga.Unique())
	saga.StartedBy(def, saga.ByIndex(def, "payment", func(m IxKillCheckout) string { return m.Payment }),
		func(_ context.Context, c *saga.Context[ixKillData], m IxKillCheckout) error {
			c.Data.Payment = m.Payment
			c.Data.Checkouts++
			return nil
		})
	return def
}

func ixKillOptions() []saga.Option {
	return workerOptions(ixKillSaga(), transport.QueueConfig{Name: ixKillQueue, LockDuration: time.Second, MaxDeliveryCount: 30})
}

// TestIndexKillWorkerHelper is a worker process of
// TestUniqueIndexUnderKills; run by go test, it returns at once.
func TestIndexKillWorkerHelper(t *testing.T) {
	url := os.Getenv(ixKillWorkerEnv)
	if url == "" {
		return
	}
	n := newNode(t, url)
	runWorker(t, func(hooks saga.Option) *saga.Dispatcher {
		return n.dispatcher(t, n.store, ixKillQueue, append(ixKillOptions(), hooks)...)
	})
}

// TestUniqueIndexUnderKills: three worker processes take checkouts, four
// per payment, each correlated by the unique payment index, while workers
// are SIGKILLed at random points. In the end every payment has exactly
// one instance, which every one of its checkouts reached once, and no
// other instance exists.
func TestUniqueIndexUnderKills(t *testing.T) {
	rng := killRand(t, 0x49584b4c)
	payments, perPayment, cycles := 48, 4, 6
	if testing.Short() {
		payments, cycles = 18, 3
	}
	srv := startServer(t)
	n := newNode(t, srv.ClientURL())
	n.openQueue(t, transport.QueueConfig{Name: ixKillQueue, LockDuration: time.Second, MaxDeliveryCount: 30})
	d := n.dispatcher(t, n.store, ixKillQueue, ixKillOptions()...) // sends and reads; never runs
	fleet := &r1Fleet{t: t, url: srv.ClientURL(), stats: map[string]int{}, helper: "^TestIndexKillWorkerHelper$", env: ixKillWorkerEnv}
	t.Cleanup(fleet.killAll)

	// Every payment's checkouts, shuffled, so that a payment's starts
	// come at once and far apart, to different workers.
	var msgs []int
	for p := range payments {
		for range perPayment {
			msgs = append(msgs, p)
		}
	}
	rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	ctx := t.Context()
	var workers [3]*r1Worker
	kills := 0
	for c := range cycles {
		fleet.fill(workers[:])
		life := time.Duration(200+rng.IntN(1001)) * time.Millisecond
		alive := time.Now()
		batch := msgs[c*len(msgs)/cycles : (c+1)*len(msgs)/cycles]
		for j, p := range batch {
			id := fmt.Sprintf("co-%d-%d", c, j)
			if _, err := d.Send(ctx, IxKillCheckout{Payment: fmt.Sprintf("pay-%02d", p)}, saga.WithMessageID(id)); err != nil {
				t.Fatal(err)
			}
			if j%4 == 3 {
				r1SleepUntil(t, alive.Add(life*time.Duration(j+1)/time.Duration(len(batch))))
			}
		}
		r1SleepUntil(t, alive.Add(life))
		for _, i := range rng.Perm(3)[:1+rng.IntN(2)] {
			fleet.kill(workers[i])
			workers[i] = nil
			kills++
		}
	}
	fleet.fill(workers[:])
	def := ixKillSaga()
	var last string
	deadline := time.Now().Add(60 * time.Second)
	for {
		last = ixKillCheck(t, d, def, payments, perPayment)
		if last == "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, w := range workers {
		fleet.stop(w)
	}
	if last != "" {
		t.Fatalf("after %d kills: %s", kills, last)
	}
	keys := 0
	for k, err := range n.store.(saga.ListingStore).ListKeys(ctx, "ixkill.") {
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.TrimPrefix(k, "ixkill."), ".") {
			keys++
		}
	}
	if keys != payments {
		t.Fatalf("%d instances of ixkill, want one a payment (%d)", keys, payments)
	}
	s := fleet.counts()
	t.Logf("%d payments × %d checkouts, %d kills, %d worker starts; steps: %d handled, %d duplicate, %d retried, %d dead-lettered, %d conflicts",
		payments, perPayment, kills, fleet.started, s[string(saga.Handled)], s[string(saga.Duplicate)], s[string(saga.Retried)], s[string(saga.DeadLettered)], s["conflicts"])
}

// ixKillCheck returns what is not yet as it must end ("" if all is): one
// instance a payment, reached by all its checkouts.
func ixKillCheck(t *testing.T, d *saga.Dispatcher, def *saga.Definition[ixKillData], payments, perPayment int) string {
	t.Helper()
	for p := range payments {
		value := fmt.Sprintf("pay-%02d", p)
		var ids []string
		for inst, err := range saga.Find(t.Context(), d, def, saga.Where("payment", value)) {
			if err != nil {
				return err.Error()
			}
			ids = append(ids, inst.ID)
		}
		if len(ids) != 1 {
			return fmt.Sprintf("%s: instances %q, want one", value, ids)
		}
		data, _, err := saga.InstanceOf(t.Context(), d, def, ids[0])
		if err != nil {
			return err.Error()
		}
		if data.Checkouts != perPayment {
			return fmt.Sprintf("%s: instance %s reached by %d checkouts, want %d", value, ids[0], data.Checkouts, perPayment)
		}
	}
	return ""
}
