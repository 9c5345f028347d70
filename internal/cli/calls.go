package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/jetsaga/jetsaga/saga"
)

// callsInDoubt lists the calls (saga.Call) whose outcome is unknown and
// whose intent is older than olderThan, with
// saga.Dispatcher.CallsInDoubt, the API an application calls.
func (e *env) callsInDoubt(ctx context.Context, olderThan time.Duration) ([]saga.CallInDoubt, error) {
	d, err := e.reader(ctx)
	if err != nil {
		return nil, err
	}
	out := []saga.CallInDoubt{}
	for c, err := range d.CallsInDoubt(ctx, olderThan) {
		if err != nil {
			return out, err
		}
		out = append(out, c)
	}
	return out, nil
}

func cmdSagasCalls(c *call) error {
	older := time.Minute
	if len(c.args) > 0 {
		d, err := time.ParseDuration(c.args[0])
		if err != nil || d < 0 {
			return fmt.Errorf("%w: %q: a duration such as 1m or 24h", ErrUsage, c.args[0])
		}
		older = d
	}
	cs, err := c.env.callsInDoubt(c.ctx, older)
	if err != nil {
		return err
	}
	err = c.out(cs, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "SAGA\tID\tCALL\tKEY\tINTENT")
		for _, v := range cs {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", v.Saga, v.ID, v.Name, v.Key, fmtTime(v.At))
		}
		w.Flush()
		fmt.Fprintf(c.stdout, "%d call(s) in doubt\n", len(cs))
	})
	if err == nil && len(cs) > 0 {
		return fmt.Errorf("%w: %d calls in doubt", ErrStuck, len(cs)) // exit 7, as sagas stuck
	}
	return err
}
