package saga_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

// An approval waits for a decision. The reminder's handler forgets to say
// so, and leaves the instance stuck: running, with no timeout pending and
// no message expected.

type (
	ApprovalRequested struct{ Request string }
	Decided           struct{ Request string }
	Remind            struct{ Request string }
	approval          struct{ Reminded bool }
)

// liveness begin
var Approval = saga.Define[approval]("approval", saga.CheckLiveness())

func init() {
	saga.StartedBy(Approval, saga.By(func(m ApprovalRequested) string { return m.Request }),
		func(ctx context.Context, c *saga.Context[approval], m ApprovalRequested) error {
			return c.Expect(saga.MessageName[Decided]()) // until the next step
		})
	saga.Handles(Approval, saga.By(func(m Decided) string { return m.Request }),
		func(ctx context.Context, c *saga.Context[approval], m Decided) error {
			c.MarkComplete()
			return nil
		})
	saga.Handles(Approval, saga.By(func(m Remind) string { return m.Request }),
		func(ctx context.Context, c *saga.Context[approval], m Remind) error {
			c.Data.Reminded = true
			return nil // the bug: no c.Expect(...), no timeout; stuck
		})
}

// liveness end

// A dispatcher lists the instances that wait for nothing.
func ExampleDispatcher_StuckInstances() {
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	broker, err := transport.NewMemory()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer broker.Close()
	steps := make(chan struct{}, 3)
	d, err := saga.NewDispatcher(broker, memstore.New(), "approvals", saga.WithSagas(Approval),
		saga.WithHooks(saga.Hooks{StepDone: func(context.Context, saga.StepInfo, saga.StepResult) { steps <- struct{}{} }}))
	if err != nil {
		fmt.Println(err)
		return
	}
	run, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(run) }()
	d.Send(ctx, ApprovalRequested{Request: "r1"})
	d.Send(ctx, ApprovalRequested{Request: "r2"})
	d.Send(ctx, Remind{Request: "r2"})
	for range 3 {
		<-steps
	}
	cancel()
	<-done

	for inst, err := range d.StuckInstances(ctx, "approval") {
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("stuck: %s/%s %s\n", inst.Saga, inst.ID, inst.Data)
	}
	// Output:
	// stuck: approval/r2 {"Reminded":true}
}
