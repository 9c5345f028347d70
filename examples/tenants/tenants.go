// Package tenants is a multi-tenant saga on the fair layout: invoice
// reminders, one saga per invoice, each tenant's invoices keyed by the
// tenant, so that one tenant's burst of reminders coming due at once
// does not hold up the others'.
//
// The three settings that make the layout, together (docs/operating.md,
// "Fairness between tenants"):
//
//  1. the dispatcher's queue has several partitions (Options: a
//     transport.QueueConfig through saga.WithQueueConfig);
//  2. each invoice's saga is keyed by its tenant (saga.PartitionKeyBy on
//     the definition): its timeouts and messages go to the tenant's
//     partition;
//  3. a key limit (saga.WithKeyLimit): at most that many steps of one
//     tenant run at once while another tenant's message waits for a
//     slot, so a burst cannot keep the others out (alone, it takes every
//     slot).
//
// go run ./examples/tenants/demo plays one noisy tenant and ten quiet
// ones on both layouts and prints how late each tenant's reminders were.
package tenants

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// Messages.
type (
	// InvoiceIssued starts an invoice's saga: a reminder after Due.
	InvoiceIssued struct {
		Tenant, Invoice string
		Due             time.Duration
	}
	// ReminderEmail is the command the saga sends to Config.Emails when
	// the invoice's reminder comes due.
	ReminderEmail struct {
		Tenant, Invoice string
		DueAt           time.Time
	}
	reminderDue struct{}
)

func (InvoiceIssued) MessageName() string { return "tenants.InvoiceIssued" }
func (ReminderEmail) MessageName() string { return "tenants.ReminderEmail" }
func (reminderDue) MessageName() string   { return "tenants.ReminderDue" }

// Invoice is an invoice saga's data.
type Invoice struct {
	DueAt time.Time
}

// ID is an invoice saga's instance ID: "tenant/invoice". The tenant must
// be a valid PartitionKey and contain no "/".
func ID(tenant, invoice string) string { return tenant + "/" + invoice }

// Tenant returns the tenant of an instance ID.
func Tenant(id string) string {
	tenant, _, _ := strings.Cut(id, "/")
	return tenant
}

// New returns the invoice saga: it requests the reminder when the invoice
// is issued and, when it comes due, sends one ReminderEmail to emails and
// completes.
func New(emails string) *saga.Definition[Invoice] {
	d := saga.Define[Invoice]("invoice", saga.PartitionKeyBy(Tenant)) // 2: keyed by the tenant
	saga.StartedBy(d, saga.By(func(m InvoiceIssued) string { return ID(m.Tenant, m.Invoice) }),
		func(ctx context.Context, c *saga.Context[Invoice], m InvoiceIssued) error {
			c.Data.DueAt = c.Now().Add(m.Due)
			_, err := c.RequestTimeout(m.Due, reminderDue{})
			return err
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[Invoice], _ reminderDue) error {
		tenant, invoice, _ := strings.Cut(c.ID(), "/")
		c.MarkComplete()
		return c.Send(emails, ReminderEmail{Tenant: tenant, Invoice: invoice, DueAt: c.Data.DueAt})
	})
	return d
}

// Layout is a dispatcher's queue layout.
type Layout struct {
	// Partitions of the dispatcher's queue (fixed when the queue is
	// created). 1 is the default layout.
	Partitions int
	// KeyLimit is how many steps of one tenant run at once while another
	// tenant's message waits for a slot; 0: no limit. A tenant alone runs
	// up to Concurrency (see saga.WithKeyLimit).
	KeyLimit int
	// Concurrency is how many steps run at once (saga.WithConcurrency);
	// 0: the dispatcher's default, 8.
	Concurrency int
}

// Fair is the layout of the project's noisy-neighbour benchmark: 11
// partitions and 4 steps of a tenant at once. With 11 partitions a quiet
// tenant shares the noisy one's partition with probability 1/11; the
// chance that none of 10 quiet tenants does is (10/11)^10, about 39%:
// take more partitions for more tenants (see docs/operating.md).
var Fair = Layout{Partitions: 11, KeyLimit: 4}

// Options are the dispatcher options of layout l for queue: the queue's
// partitions, the key limit and the concurrency (1 and 3 of the package
// documentation).
func Options(queue string, l Layout) ([]saga.Option, error) {
	if l.Partitions < 1 || l.KeyLimit < 0 || l.Concurrency < 0 {
		return nil, fmt.Errorf("tenants: layout %+v: want at least 1 partition, a key limit and a concurrency not negative", l)
	}
	opts := []saga.Option{saga.WithQueueConfig(transport.QueueConfig{Name: queue, Partitions: l.Partitions})}
	if l.KeyLimit > 0 {
		opts = append(opts, saga.WithKeyLimit(l.KeyLimit))
	}
	if l.Concurrency > 0 {
		opts = append(opts, saga.WithConcurrency(l.Concurrency))
	}
	return opts, nil
}
