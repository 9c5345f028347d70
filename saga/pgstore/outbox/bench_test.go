package outbox_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/transport"
)

// BenchmarkOutbox: messages per second through the outbox — each written
// in a transaction of its own and committed, relayed by one relay, the
// clock stopped when the last is relayed — beside the baseline of the
// same messages sent to the queue directly (Queue.Send, one at a time),
// on the same nats-server in the same run; and both again with 4 ×
// GOMAXPROCS concurrent senders or writers. msgs/s is the figure.
//
//	go test -run '^$' -bench BenchmarkOutbox -benchtime 2000x ./outbox/   (in saga/pgstore)
func BenchmarkOutbox(b *testing.B) {
	ctx := b.Context()
	pool := newPool(b)
	broker, _ := newBroker(b)
	q, err := broker.OpenQueue(ctx, transport.QueueConfig{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	run := 0
	msg := func(i int) *transport.Message {
		return &transport.Message{Body: []byte(`{"user":"ann@example.com"}`), MessageID: fmt.Sprintf("r%d-%d", run, i)}
	}
	b.Run("direct-send", func(b *testing.B) {
		run++
		for i := 0; b.Loop(); i++ {
			if _, err := q.Send(ctx, msg(i)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
	b.Run("direct-send-parallel", func(b *testing.B) {
		run++
		var n atomic.Int64
		b.SetParallelism(4) // 4 × GOMAXPROCS senders
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := q.Send(ctx, msg(int(n.Add(1)))); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
	b.Run("outbox-parallel", func(b *testing.B) {
		run++
		tbl := newOutbox(b, pool, broker)
		testutil.RunUntilCleanup(b, tbl.Run)
		var n atomic.Int64
		b.SetParallelism(4) // 4 × GOMAXPROCS writers
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := int(n.Add(1))
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					_, err := tbl.Send(ctx, tx, "bench", msg(i))
					return err
				})
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.StopTimer()
		start := time.Now()
		testutil.AwaitTrue(b, time.Minute, "the outbox relayed", func() bool { return pending(b, pool, tbl) == 0 })
		total := b.Elapsed() + time.Since(start)
		b.ReportMetric(float64(b.N)/total.Seconds(), "msgs/s")
	})
	b.Run("outbox", func(b *testing.B) {
		run++
		tbl := newOutbox(b, pool, broker)
		testutil.RunUntilCleanup(b, tbl.Run)
		for i := 0; b.Loop(); i++ {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := tbl.Send(ctx, tx, "bench", msg(i))
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		// The clock runs until the relay has published the last row.
		start := time.Now()
		testutil.AwaitTrue(b, time.Minute, "the outbox relayed", func() bool { return pending(b, pool, tbl) == 0 })
		total := b.Elapsed() + time.Since(start)
		b.ReportMetric(float64(b.N)/total.Seconds(), "msgs/s")
	})
}
