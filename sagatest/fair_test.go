package sagatest_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/sagatest"
)

// Three tenants' reminders come due at the same instant, tenant A's five
// first in the queue: on the virtual clock they are served round-robin
// across the tenants' keys, the same way every run.

type (
	TenantReminders struct {
		Tenant string
		N      int
		At     time.Time
	}
	tenantDue struct{ N int }
)

func tenantSaga() *saga.Definition[struct{}] {
	d := saga.Define[struct{}]("tenant-reminders", saga.PartitionKeyBy(func(id string) string { return id }))
	saga.StartedBy(d, saga.By(func(m TenantReminders) string { return m.Tenant }),
		func(ctx context.Context, c *saga.Context[struct{}], m TenantReminders) error {
			for i := range m.N {
				if _, err := c.RequestTimeoutAt(m.At, tenantDue{N: i}); err != nil {
					return err
				}
			}
			return nil
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[struct{}], _ tenantDue) error { return nil })
	return d
}

func TestTimeoutsDueTogetherServedRoundRobin(t *testing.T) {
	for range 3 { // deterministic: the same order every run
		sagatest.Run(t, []saga.Saga{tenantSaga()}, func(t *testing.T, env *sagatest.Env) {
			at := env.Now().Add(time.Hour)
			env.Send(TenantReminders{Tenant: "A", N: 5, At: at})
			env.Send(TenantReminders{Tenant: "B", N: 1, At: at})
			env.Send(TenantReminders{Tenant: "C", N: 2, At: at})
			served := len(env.ServedKeys()) // the three starts
			env.AdvanceTo(at)
			got := env.ServedKeys()[served:]
			want := []string{"A", "B", "C", "A", "C", "A", "A", "A"}
			if !slices.Equal(got, want) {
				t.Errorf("keys served %v, want %v: round-robin across the keys, by earliest due time, then name", got, want)
			}
		})
	}
}
