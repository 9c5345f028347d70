package saga_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

// Each account's invoices share the account's key: their timeouts come
// due in the account's partition, and a dispatcher runs at most two
// steps of one account at once.

type (
	AccountInvoice    struct{ Invoice string } // Invoice: "account/number"
	AccountInvoiceDue struct{}
	accountInvoice    struct{}
)

// fairness begin
var AccountInvoices = saga.Define[accountInvoice]("account-invoice",
	saga.PartitionKeyBy(func(id string) string {
		account, _, _ := strings.Cut(id, "/")
		return account // the instance's key: its account
	}))

// fairness end

func init() {
	saga.StartedBy(AccountInvoices, saga.By(func(m AccountInvoice) string { return m.Invoice }),
		func(ctx context.Context, c *saga.Context[accountInvoice], m AccountInvoice) error {
			_, err := c.RequestTimeout(30*24*time.Hour, AccountInvoiceDue{}) // carries the key
			return err
		})
	saga.OnTimeout(AccountInvoices, func(ctx context.Context, c *saga.Context[accountInvoice], _ AccountInvoiceDue) error {
		c.MarkComplete()
		return nil
	})
}

func ExamplePartitionKeyBy() {
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	broker, err := transport.NewMemory()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer broker.Close()
	steps := make(chan struct{}, 1)
	d, err := saga.NewDispatcher(broker, memstore.New(), "invoices", saga.WithSagas(AccountInvoices),
		saga.WithQueueConfig(transport.QueueConfig{Partitions: 4}),
		saga.WithKeyLimit(2), // at most two steps of one account at once while others wait
		saga.WithHooks(saga.Hooks{StepDone: func(context.Context, saga.StepInfo, saga.StepResult) { steps <- struct{}{} }}),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	run, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(run) }()
	_, err = d.Send(ctx, AccountInvoice{Invoice: "acme/2031-001"})
	if err == nil {
		<-steps
	}
	cancel()
	<-done
	if err != nil {
		fmt.Println(err)
		return
	}
	inst, err := d.Instance(ctx, "account-invoice", "acme/2031-001")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("key:", inst.PartitionKey)
	// Output: key: acme
}
