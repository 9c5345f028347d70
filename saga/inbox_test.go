package saga_test

// Stage step, its inbox (inbox.go): a message handled once per instance
// however often it is delivered, within the inbox retention.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// Deposit adds Amount to an account's balance.
type Deposit struct {
	Account string
	Amount  int
}

type accountData struct{ Balance int }

// accountSaga adds each Deposit to the instance's balance: a message
// applied twice shows in the balance.
func accountSaga() *saga.Definition[accountData] {
	def := saga.Define[accountData]("account")
	saga.StartedBy(def, saga.By(func(m Deposit) string { return m.Account }),
		func(_ context.Context, c *saga.Context[accountData], m Deposit) error {
			c.Data.Balance += m.Amount
			return nil
		})
	return def
}

// storedInbox returns how many identities the stored record of account id
// holds in its inbox.
func storedInbox(t *testing.T, e *virtualEnv, id string) int {
	t.Helper()
	b, _, err := e.store.Load(e.ctx, saga.StoreKey("account", id))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Inbox []string `json:"inbox"`
		Older []byte   `json:"inbox_older"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return len(r.Inbox) + len(r.Older)/9
}

// TestInboxHotInstanceRedelivery: a message whose step committed but whose
// completion was lost (its worker died at that point) is delivered again
// once its lock expires, again and again up to MaxDeliveryCount, while
// hundreds of other messages reach the same instance in between — far
// more than the 128 identities the inbox used to keep. Every delivery
// after the first must find it in the inbox: the balance counts it once.
// Once the queue can no longer deliver it (the inbox retention), the
// inbox forgets it and its kind: the record stays small.
func TestInboxHotInstanceRedelivery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		qcfg := transport.QueueConfig{Name: "hot", LockDuration: 5 * time.Second, MaxDeliveryCount: 4}
		e := newVirtualEnv(t, qcfg, saga.WithSagas(accountSaga()),
			saga.LoseCompletion(func(del *transport.Delivery) bool {
				// Lost on every delivery but the last the queue makes.
				return del.MessageID == "first" && del.DeliveryCount < qcfg.MaxDeliveryCount
			}))
		e.send(Deposit{Account: "a", Amount: 1000}, saga.WithMessageID("first"))
		const between = 300 // other steps on the instance before each redelivery
		sent := 1000
		for round := 1; round <= qcfg.MaxDeliveryCount; round++ {
			for i := range between {
				e.send(Deposit{Account: "a", Amount: 1}, saga.WithMessageID(fmt.Sprintf("d-%d-%d", round, i)))
				sent++
			}
			var firsts []saga.StepResult
			for _, ev := range e.log.filter(saga.MessageName[Deposit]()) {
				if ev.Info.MessageID == "first" {
					firsts = append(firsts, ev.Result)
				}
			}
			if len(firsts) != round {
				t.Fatalf("round %d: message delivered %d times, want %d (a redelivery came early: the test proves nothing)", round, len(firsts), round)
			}
			if round > 1 && firsts[round-1].Outcome != saga.Duplicate {
				t.Errorf("delivery %d, after %d other steps: %s (%v), want %s", round, (round-1)*between, firsts[round-1].Outcome, firsts[round-1].Err, saga.Duplicate)
			}
			s, _, ok := data[accountData](t, e.d, "account", "a")
			if !ok || s.Balance != sent {
				t.Fatalf("delivery %d, after %d other steps: balance %d, sent %d", round, (round-1)*between, s.Balance, sent)
			}
			if round < qcfg.MaxDeliveryCount {
				time.Sleep(qcfg.LockDuration + 2*time.Second) // the lock expires: delivered again
				synctest.Wait()
			}
		}
		if n := storedInbox(t, e, "a"); n != sent-1000+1 {
			t.Errorf("inbox holds %d identities within the retention, want all %d", n, sent-1000+1)
		}
		// Beyond the retention the queue cannot deliver them again: the
		// next step forgets all but the newest 128.
		time.Sleep(saga.InboxRetention(qcfg) + 2*time.Second) // entries' times are rounded up to seconds
		e.send(Deposit{Account: "a", Amount: 1}, saga.WithMessageID("late"))
		if n := storedInbox(t, e, "a"); n != 128 {
			t.Errorf("inbox holds %d identities after the retention, want the newest 128", n)
		}
	})
}

type auditData struct{ Deposits int }

// TestInboxDelayedRetryOfSharedMessage: a deposit two sagas handle is
// committed on the account and fails on the audit; its delayed retry
// comes 10 minutes later, after 300 other deposits on the account which,
// beyond the inbox retention, have made its inbox forget it. The retry lists the
// instances it is committed on: the account does not apply it again.
func TestInboxDelayedRetryOfSharedMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var failAudit atomic.Bool
		audit := saga.Define[auditData]("audit")
		saga.StartedBy(audit, saga.By(func(m Deposit) string { return m.Account }),
			func(_ context.Context, c *saga.Context[auditData], m Deposit) error {
				if failAudit.Load() {
					return errors.New("audit unavailable")
				}
				c.Data.Deposits++
				return nil
			})
		const backoff = 10 * time.Minute
		qcfg := transport.QueueConfig{Name: "shared"}
		e := newVirtualEnv(t, qcfg, saga.WithSagas(accountSaga(), audit),
			saga.WithRetry(saga.RetryPolicy{Immediate: 1, Delayed: 1, Backoff: func(int) time.Duration { return backoff }}))
		if saga.InboxRetention(qcfg) >= backoff {
			t.Fatalf("inbox retention %v, not shorter than the backoff: the test proves nothing", saga.InboxRetention(qcfg))
		}
		failAudit.Store(true)
		e.send(Deposit{Account: "a", Amount: 1000}, saga.WithMessageID("first"))
		if r := last[Deposit](e).Result; r.Outcome != saga.Retried {
			t.Fatalf("first: %s (%v), want %s", r.Outcome, r.Err, saga.Retried)
		}
		failAudit.Store(false)
		time.Sleep(saga.InboxRetention(qcfg) + 2*time.Second) // deposits after it forget the first
		for i := range 300 {
			e.send(Deposit{Account: "a", Amount: 1}, saga.WithMessageID(fmt.Sprint("d-", i)))
		}
		time.Sleep(backoff - saga.InboxRetention(qcfg)) // the retry comes
		synctest.Wait()
		if r := last[Deposit](e).Result; r.Outcome != saga.Handled || r.Err != nil {
			t.Fatalf("the retry: %s (%v), want %s", r.Outcome, r.Err, saga.Handled)
		}
		if s, _, _ := data[accountData](t, e.d, "account", "a"); s.Balance != 1300 {
			t.Errorf("account balance %d, sent 1300", s.Balance)
		}
		if s, _, _ := data[auditData](t, e.d, "audit", "a"); s.Deposits != 301 {
			t.Errorf("audit counted %d deposits, want 301", s.Deposits)
		}
	})
}

// TestInboxTellsQueuesApart: messages without a MessageID, one from each
// of two queues, reach the same instance with the same sequence number;
// their identities in the inbox name the queue too, so both are handled
// (identified by the sequence number alone, unique per queue only, the
// second was once dropped as a redelivery).
func TestInboxTellsQueuesApart(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	n := newNode(t, srv.ClientURL())
	var ds []*saga.Dispatcher
	var qs []*transport.Queue
	for _, name := range []string{"qa", "qb"} {
		qcfg := transport.QueueConfig{Name: name, LockDuration: 2 * time.Second}
		qs = append(qs, n.openQueue(t, qcfg))
		d := n.dispatcher(t, nil, name, saga.WithSagas(counterSaga()), saga.WithQueueConfig(qcfg))
		if _, err := d.Send(ctxFor(t), Incr{ID: "shared"}); err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
		run(t, d)
	}
	// Wait for both steps (a sent message reaches its queue a moment after
	// the send, so an empty queue proves nothing), then for quiet.
	testutil.Await(t, 10*time.Second, func() string {
		if c, _, _ := data[counter](t, ds[0], "counter", "shared"); c.Count < 2 {
			return fmt.Sprintf("count %d, want 2: one Incr came through each queue", c.Count)
		}
		return queueEmpty(t, qs[0]) + queueEmpty(t, qs[1])
	})
	if c, _, _ := data[counter](t, ds[0], "counter", "shared"); c.Count != 2 {
		t.Errorf("count %d, want 2: one Incr came through each queue", c.Count)
	}
}
