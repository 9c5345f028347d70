package demo

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jetsaga/jetsaga/saga"
)

// Main runs run with a context that SIGINT and SIGTERM cancel, so that run
// can shut down gracefully. If run fails, Main prints the error after name
// and exits with status 1.
func Main(name string, run func(ctx context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// Play runs the dispatcher d and the feed f in the background while play
// runs, with p's timestamps counting from the moment play starts. Then it
// stops them both: d's Run lets the steps in flight finish and returns.
// Play returns play's error, or else the dispatcher's.
func Play(ctx context.Context, p *Printer, d *saga.Dispatcher, f *Feed, play func(context.Context) error) error {
	bg, stopBG := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = d.Run(bg) })
	wg.Go(func() { f.Run(bg) })

	p.Start()
	err := play(ctx)
	if err == nil {
		p.Printf("")
		p.Printf("done in %.1fs; stopping the dispatcher", time.Since(p.Started()).Seconds())
	}
	stopBG()
	wg.Wait()
	if err == nil && runErr != nil {
		err = fmt.Errorf("dispatcher: %w", runErr)
	}
	return err
}

// SleepUntil waits until t, or returns early with ctx's cause.
func SleepUntil(ctx context.Context, t time.Time) error {
	select {
	case <-time.After(time.Until(t)):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
