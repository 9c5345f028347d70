package sagatest_test

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/sagatest"
)

// An approval waits for a decision, and is reminded after a day. The buggy
// version's reminder forgets to say that the instance still waits for the
// decision: the instance is stuck.

type (
	ApprovalRequested struct{ Request string }
	Decided           struct{ Request string }
	remindApprover    struct{}
	approvalState     struct{ Reminded bool }
)

func approvalSaga(buggy bool, opts ...saga.DefinitionOption) *saga.Definition[approvalState] {
	d := saga.Define[approvalState]("approval", opts...)
	saga.StartedBy(d, saga.By(func(m ApprovalRequested) string { return m.Request }),
		func(ctx context.Context, c *saga.Context[approvalState], m ApprovalRequested) error {
			_, err := c.RequestTimeout(24*time.Hour, remindApprover{})
			return err
		})
	saga.Handles(d, saga.By(func(m Decided) string { return m.Request }),
		func(ctx context.Context, c *saga.Context[approvalState], m Decided) error {
			c.MarkComplete()
			return nil
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[approvalState], _ remindApprover) error {
		c.Data.Reminded = true
		if buggy {
			return nil // no timeout pending, no message expected: stuck
		}
		return c.Expect(saga.MessageName[Decided]())
	})
	return d
}

func TestRunFailsATestThatLeavesAStuckInstance(t *testing.T) {
	out := expectFailure(t, func(t *testing.T) {
		d := approvalSaga(true, saga.CheckLiveness())
		sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
			env.Send(ApprovalRequested{Request: "r1"})
			env.Send(ApprovalRequested{Request: "r2"})
			env.Advance(24 * time.Hour) // both reminded; r1 decided below
			env.Send(Decided{Request: "r1"})
		})
	})
	want := regexp.MustCompile(`sagatest: at the end of the test:\n\s+` +
		`approval/r2 is stuck: running, with no pending timeout and no expected message since its last step at \+1d \(saga.CheckLiveness; saga.Context.Expect\)\n(.*\n)*\s+\+1d +waits for nothing: stuck \(saga.CheckLiveness\)\n`)
	if !want.MatchString(out) {
		t.Errorf("the test's output does not match %s:\n%s", want, out)
	}
	if regexp.MustCompile(`approval/r1 is stuck`).MatchString(out) {
		t.Errorf("the completed instance r1 is reported stuck:\n%s", out)
	}
}

// liveness test begin
func TestApprovalNeverStuck(t *testing.T) {
	d := approvalSaga(false, saga.CheckLiveness())
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(ApprovalRequested{Request: "r1"})
		env.Advance(24 * time.Hour) // reminded: waits for the decision
		if stuck := env.Stuck(); len(stuck) != 0 {
			t.Errorf("stuck after the reminder: %s/%s", stuck[0].Saga, stuck[0].ID)
		}
	}) // Run fails the test if an instance is stuck at the end
}

// liveness test end

func TestStuckFindsTheSeededStuckInstance(t *testing.T) {
	d := approvalSaga(true, saga.CheckLiveness())
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(ApprovalRequested{Request: "r1"})
		if stuck := env.Stuck(); len(stuck) != 0 {
			t.Errorf("stuck while the reminder is pending: %d instance(s)", len(stuck))
		}
		env.Advance(24 * time.Hour)
		stuck := env.Stuck()
		if len(stuck) != 1 || stuck[0].Saga != "approval" || stuck[0].ID != "r1" || string(stuck[0].Data) != `{"Reminded":true}` {
			t.Fatalf("Stuck: got %v, want approval/r1", stuck)
		}
		env.Send(Decided{Request: "r1"}) // the test ends with no stuck instance
	})
}

func TestWithoutCheckLivenessNothingIsStuck(t *testing.T) {
	d := approvalSaga(true)
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(ApprovalRequested{Request: "r1"})
		env.Advance(24 * time.Hour)
		if stuck := env.Stuck(); len(stuck) != 0 {
			t.Errorf("Stuck: got %d instance(s) of a saga without CheckLiveness, want none", len(stuck))
		}
	})
}

func TestExpectRefusesAMessageTheSagaDoesNotHandle(t *testing.T) {
	d := saga.Define[approvalState]("approval", saga.CheckLiveness())
	var got error
	saga.StartedBy(d, saga.By(func(m ApprovalRequested) string { return m.Request }),
		func(ctx context.Context, c *saga.Context[approvalState], m ApprovalRequested) error {
			got = c.Expect(saga.MessageName[Decided]()) // not handled by d
			return got
		})
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(ApprovalRequested{Request: "r1"})
		if !errors.Is(got, saga.ErrUnknownMessage) || !errors.Is(got, saga.ErrPermanent) {
			t.Errorf("Expect: got %v, want ErrUnknownMessage and ErrPermanent", got)
		}
		if dl := env.DeadLetters(); len(dl) != 1 || dl[0].DeadLetterReason != saga.ReasonPermanent {
			t.Errorf("dead letters: got %v, want the request with reason %s", dl, saga.ReasonPermanent)
		}
	})
}
