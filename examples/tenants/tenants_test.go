package tenants_test

import (
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/examples/tenants"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/sagatest"
)

// An invoice's reminder e-mail goes out once, when its reminder comes
// due, and the saga completes.
func TestReminder(t *testing.T) {
	d := tenants.New("emails")
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		start := env.Now()
		env.Send(tenants.InvoiceIssued{Tenant: "acme", Invoice: "2031-001", Due: 14 * 24 * time.Hour})
		env.Advance(14*24*time.Hour - time.Nanosecond)
		env.AssertRunning(t, d, tenants.ID("acme", "2031-001"))
		env.Advance(time.Nanosecond)
		env.AssertCompleted(t, d, tenants.ID("acme", "2031-001"))
		env.AssertSent(t, "emails", tenants.ReminderEmail{Tenant: "acme", Invoice: "2031-001", DueAt: start.Add(14 * 24 * time.Hour)})
	})
}

func TestOptions(t *testing.T) {
	if _, err := tenants.Options("invoices", tenants.Layout{}); err == nil {
		t.Error("a layout of no partitions accepted")
	}
	opts, err := tenants.Options("invoices", tenants.Fair)
	if err != nil || len(opts) != 2 {
		t.Errorf("Options(Fair): %d options, %v; want the queue config and the key limit", len(opts), err)
	}
}
