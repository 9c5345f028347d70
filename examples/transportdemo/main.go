// Command transportdemo shows jetsaga's scheduled-message transport on an
// embedded nats-server: it sends a message, schedules three reminders,
// cancels one, browses the queue, and receives what activates, printing
// sequence numbers, enqueue times and lateness as it goes.
//
//	go run ./examples/transportdemo              # embedded nats-server
//	go run ./examples/transportdemo -nats nats://127.0.0.1:4222
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/jetsaga/jetsaga/examples/internal/demo"
	"github.com/jetsaga/jetsaga/transport"
)

func main() {
	url := flag.String("nats", os.Getenv("NATS_URL"), "NATS server URL; empty starts an embedded nats-server")
	step := flag.Duration("step", time.Second, "time between the scheduled reminders")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, *url, *step); err != nil {
		fmt.Fprintln(os.Stderr, "transportdemo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, url string, step time.Duration) error {
	nc, cleanup, err := demo.Connect(url, out)
	if err != nil {
		return err
	}
	defer cleanup()

	broker, err := transport.NewJetStream(nc)
	if err != nil {
		return err
	}
	defer broker.Close()
	q, err := broker.OpenQueue(ctx, transport.QueueConfig{Name: "demo-reminders"})
	if err != nil {
		return err
	}

	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "%6.3fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}

	r, err := q.Send(ctx, &transport.Message{Body: []byte("welcome"), MessageID: "welcome-ann"})
	if err != nil {
		return err
	}
	// Like Service Bus's, Send returns no sequence number: the message
	// gets one as it enters the queue, and carries it when received.
	say("sent     %-12q duplicate=%v", "welcome", r.Duplicate)

	var seqs []uint64
	for i, body := range []string{"reminder-1", "reminder-2", "reminder-3"} {
		at := start.Add(time.Duration(i+1) * step)
		seq, err := q.Schedule(ctx, &transport.Message{Body: []byte(body)}, at)
		if err != nil {
			return err
		}
		seqs = append(seqs, seq)
		say("scheduled %-12q seq=%#x (partition %d, local %d) due at +%v", body, seq,
			transport.Partition(seq), transport.LocalSeq(seq), at.Sub(start).Round(time.Millisecond))
	}
	switch err := q.Cancel(ctx, seqs[1]); {
	case err == nil:
		say("cancelled %-12q: it will never be delivered", "reminder-2")
	default:
		return fmt.Errorf("cancel: %w", err)
	}

	say("browse:")
	for m, err := range q.Browse(ctx, 0) {
		if err != nil {
			return err
		}
		due := ""
		if m.State == transport.Scheduled {
			due = fmt.Sprintf(" due at +%v", m.ScheduledAt.Sub(start).Round(time.Millisecond))
		}
		say("  %-9s seq=%#-16x %-12q enqueued at +%v%s", m.State, m.Seq, m.Body,
			m.EnqueuedAt.Sub(start).Round(time.Millisecond), due)
	}

	for received := 0; received < 3; {
		rctx, cancel := context.WithTimeout(ctx, 4*step+2*time.Second)
		ds, err := q.Receive(rctx, 10)
		cancel()
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		for _, d := range ds {
			late := ""
			if !d.ScheduledAt.IsZero() {
				late = fmt.Sprintf(", %v after its due time", d.EnqueuedAt.Sub(d.ScheduledAt).Round(time.Millisecond))
			}
			say("received %-12q seq=%d enqueued at +%v%s", d.Body, d.Seq,
				d.EnqueuedAt.Sub(start).Round(time.Millisecond), late)
			if err := d.Complete(ctx); err != nil {
				return err
			}
			received++
		}
	}
	say("done: the activated reminders took the next sequence numbers after %q, with no gap", "welcome")
	return broker.DeleteQueue(ctx, q.Name())
}
