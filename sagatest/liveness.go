package sagatest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/jetsaga/jetsaga/saga"
)

// Stuck returns the stuck instances, by saga and ID: running instances of
// a saga defined with saga.CheckLiveness that wait for nothing — no
// pending timeout, no message expected by their last step
// (saga.Context.Expect). Run fails a test that leaves one; call Stuck to
// look in the middle of a test.
func (e *Env) Stuck() []*saga.Instance {
	e.t.Helper()
	e.settle()
	var out []*saga.Instance
	for inst, err := range e.d.StuckInstances(e.ctx, "") {
		if err != nil {
			e.t.Fatalf("sagatest: listing stuck instances: %v", err)
			return nil
		}
		out = append(out, inst)
	}
	slices.SortFunc(out, func(a, b *saga.Instance) int {
		return strings.Compare(a.Saga+"\x00"+a.ID, b.Saga+"\x00"+b.ID)
	})
	return out
}

// stuckLeaks describes the stuck instances, for Run's checks at the end.
func (e *Env) stuckLeaks() []string {
	var out []string
	for inst, err := range e.d.StuckInstances(e.ctx, "") {
		if err != nil {
			return append(out, fmt.Sprintf("listing stuck instances: %v", err))
		}
		out = append(out, fmt.Sprintf("%s/%s is stuck: running, with no pending timeout and no expected message since its last step at %s (saga.CheckLiveness; saga.Context.Expect)",
			inst.Saga, inst.ID, e.offset(inst.Updated)))
	}
	slices.Sort(out)
	return out
}

// waitLine describes what an instance waits for after a step, for the
// journal: its expected messages, or that it waits for nothing (stuck);
// "" for an instance not checked for liveness, or completed.
func (e *Env) waitLine(ctx context.Context, sagaName, id string) string {
	raw, _, err := e.store.Load(ctx, saga.StoreKey(sagaName, id))
	if err != nil {
		return ""
	}
	var r struct {
		Expects   *[]string                  `json:"expects"`
		Timeouts  map[string]json.RawMessage `json:"timeouts"`
		Completed bool                       `json:"completed"`
	}
	if json.Unmarshal(raw, &r) != nil || r.Expects == nil || r.Completed {
		return ""
	}
	switch {
	case len(*r.Expects) > 0:
		return "expects " + strings.Join(*r.Expects, ", ")
	case len(r.Timeouts) == 0:
		return "waits for nothing: stuck (saga.CheckLiveness)"
	}
	return ""
}
