package temporal

import (
	"context"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/jetsaga/jetsaga/timeout"
)

var _ timeout.Getter = (*Engine)(nil)

// Get reads back the timeout ref names from its workflow: its input while
// the workflow runs (the first event of its history), or, once it closed,
// its outcome: an error matching timeout.ErrAlreadyFired if it fired,
// timeout.ErrNotFound if it was cancelled, is undeliverable, never
// existed or is older than the namespace's retention. It needs no worker
// and changes nothing.
func (e *Engine) Get(ctx context.Context, ref timeout.Ref) (timeout.Timeout, error) {
	wid, err := e.parseRef(ref)
	if err != nil {
		return timeout.Timeout{}, err
	}
	desc, err := e.c.DescribeWorkflowExecution(ctx, wid, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return timeout.Timeout{}, fmt.Errorf("%w: %s", timeout.ErrNotFound, ref)
	}
	if err != nil {
		return timeout.Timeout{}, fmt.Errorf("temporal: reading %s: %w", ref, err)
	}
	if desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		var r result
		if err := e.c.GetWorkflow(ctx, wid, "").Get(ctx, &r); err != nil {
			return timeout.Timeout{}, fmt.Errorf("temporal: reading %s: its workflow closed without a result: %w", ref, err)
		}
		return timeout.Timeout{}, r.err(ref)
	}
	it := e.c.GetWorkflowHistory(ctx, wid, desc.GetWorkflowExecutionInfo().GetExecution().GetRunId(), false,
		enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return timeout.Timeout{}, fmt.Errorf("temporal: reading %s: empty history", ref)
	}
	ev, err := it.Next()
	if err != nil {
		return timeout.Timeout{}, fmt.Errorf("temporal: reading %s: %w", ref, err)
	}
	attrs := ev.GetWorkflowExecutionStartedEventAttributes()
	if attrs == nil {
		return timeout.Timeout{}, fmt.Errorf("temporal: reading %s: its history does not start with the workflow's start", ref)
	}
	var in input
	if err := e.cfg.dataConverter.FromPayloads(attrs.GetInput(), &in); err != nil {
		return timeout.Timeout{}, fmt.Errorf("temporal: reading the input of %s: %w", ref, err)
	}
	return timeout.Timeout{
		ID: in.ID, Queue: in.Queue, At: in.At, Message: in.Message.transport(),
		Saga: in.Saga, Instance: in.Instance,
	}, nil
}
