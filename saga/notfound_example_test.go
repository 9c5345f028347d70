package saga_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

type InviteSent struct{ Code string }
type InviteAccepted struct{ Code string }
type Welcome struct{ Code string }
type InviteRejected struct{ Code, Why string }

// A message for an instance that does not exist goes to the saga's
// NotFoundPolicy. Its Handler tells an invitation already used (the
// instance completed; its tombstone is kept for WithCompletedRetention)
// from one that never existed, and replies accordingly. Its replies are
// sent after it returns, with IDs fixed by the incoming message, so a
// redelivery cannot reply twice within the duplicate window. Such a step
// ends with the outcome NotFoundHandled (an ignored one with Dropped).
func ExampleNotFoundPolicy() {
	invite := saga.Define[struct{}]("invite", saga.WhenNotFound(saga.NotFoundPolicy{
		Handler: func(ctx context.Context, c *saga.NotFoundContext, m any) error {
			switch m := m.(type) {
			case InviteAccepted:
				why := "unknown invitation"
				if _, used := c.Completed(); used {
					why = "invitation already used"
				}
				return c.Reply(InviteRejected{Code: m.Code, Why: why})
			}
			return nil // other messages for a missing instance: ignored
		},
	}))
	saga.StartedBy(invite, saga.By(func(m InviteSent) string { return m.Code }),
		func(ctx context.Context, c *saga.Context[struct{}], m InviteSent) error { return nil })
	saga.Handles(invite, saga.By(func(m InviteAccepted) string { return m.Code }),
		func(ctx context.Context, c *saga.Context[struct{}], m InviteAccepted) error {
			c.MarkComplete()
			return c.Reply(Welcome(m))
		})

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	broker, _ := transport.NewMemory()
	outcomes := make(chan saga.Outcome, 4)
	d, err := saga.NewDispatcher(broker, memstore.New(), "invites", saga.WithSagas(invite), saga.WithConcurrency(1),
		saga.WithHooks(saga.Hooks{StepDone: func(_ context.Context, info saga.StepInfo, res saga.StepResult) {
			outcomes <- res.Outcome
		}}))
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan error)
	go func() { done <- d.Run(ctx) }()

	d.Send(ctx, InviteSent{Code: "c-1"})
	d.Send(ctx, InviteAccepted{Code: "c-1"}, saga.WithReplyTo("web"))
	d.Send(ctx, InviteAccepted{Code: "c-1"}, saga.WithReplyTo("web"))
	d.Send(ctx, InviteAccepted{Code: "c-2"}, saga.WithReplyTo("web"))

	web, _ := broker.Queue(ctx, "web")
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for n := 0; n < 3; {
		ds, err := web.Receive(rctx, 3-n)
		if err != nil {
			fmt.Println(err)
			return
		}
		for _, del := range ds {
			fmt.Printf("%s %s\n", del.Properties[saga.TypeProperty], del.Body)
			del.Complete(ctx)
			n++
		}
	}
	stop()
	<-done
	for range 4 {
		fmt.Print(<-outcomes, " ")
	}
	fmt.Println()
	// Output:
	// saga_test.Welcome {"Code":"c-1"}
	// saga_test.InviteRejected {"Code":"c-1","Why":"invitation already used"}
	// saga_test.InviteRejected {"Code":"c-2","Why":"unknown invitation"}
	// handled handled not-found-handled not-found-handled
}
