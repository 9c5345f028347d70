package cli

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// The timeouts migrate and timeouts drain commands: moving a saga type's
// pending timeouts between engines (saga.Dispatcher.MigrateTimeouts) and
// what is left on one (saga.Dispatcher.DrainReport).

// MigrateView is what timeouts migrate did to one timeout.
type MigrateView struct {
	Saga    string    `json:"saga"`
	ID      string    `json:"id"`
	Handle  string    `json:"handle"`
	Type    string    `json:"type,omitempty"`
	At      time.Time `json:"due,omitzero"`
	From    string    `json:"from,omitempty"` // the old ref
	To      string    `json:"to,omitempty"`   // the new ref
	Outcome string    `json:"outcome"`        // moved, fired, cancelled or failed
	Error   string    `json:"error,omitempty"`
}

// DrainView is what timeouts drain reports.
type DrainView struct {
	Saga    string         `json:"saga"`
	Engine  string         `json:"engine"`
	Drained bool           `json:"drained"`
	ByType  map[string]int `json:"by_type"`
	Pending []PendingView  `json:"pending"`
	Stale   []PendingView  `json:"stale"`
}

// migrationDispatcher returns the operator's dispatcher on the queue of
// sagaType's timeouts (queue, or the first one a listed timeout names),
// or nil if no timeout of sagaType is listed.
func (e *env) migrationDispatcher(ctx context.Context, sagaType, engine, queue string) (*saga.Dispatcher, error) {
	if err := transport.ValidateQueueName(sagaType); err != nil {
		return nil, fmt.Errorf("%w: --saga %q: 1-64 characters of [A-Za-z0-9_-]", ErrUsage, sagaType)
	}
	if engine != "queue" && e.engines[engine] == nil {
		return nil, fmt.Errorf("%w: engine %q: this command has the engines queue%s", ErrUsage, engine, e.engineList())
	}
	if queue == "" {
		ps, err := e.pendingTimeouts(ctx, "", sagaType, "")
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			if p.Queue != "" {
				queue = p.Queue
				break
			}
		}
		if queue == "" {
			return nil, nil
		}
	}
	return e.operatorDispatcher(ctx, queue)
}

func (e *env) engineList() string {
	s := ""
	for name := range e.engines {
		s += ", " + name
	}
	if s == "" {
		s = " (give --temporal-address to a build with the Temporal engine for temporal)"
	}
	return s
}

func cmdTimeoutsMigrate(c *call) error {
	if c.o.saga == "" || c.o.to == "" {
		return fmt.Errorf("%w: --saga and --to are required", ErrUsage)
	}
	d, err := c.env.migrationDispatcher(c.ctx, c.o.saga, c.o.to, c.o.queue)
	if err != nil {
		return err
	}
	if c.o.engine != "" && c.o.engine != "queue" && c.env.engines[c.o.engine] == nil {
		return fmt.Errorf("%w: --from engine %q: this command has the engines queue%s", ErrUsage, c.o.engine, c.env.engineList())
	}
	rows := []MigrateView{}
	failed := 0
	var errs []error
	if d != nil {
		if err := c.confirm(fmt.Sprintf("move the pending timeouts of saga %s to engine %s", c.o.saga, c.o.to)); err != nil {
			return err
		}
		var opts []saga.MigrateOption
		if c.o.engine != "" {
			opts = append(opts, saga.MigrateFrom(c.o.engine))
		}
		for m, err := range d.MigrateTimeouts(c.ctx, c.o.saga, c.o.to, opts...) {
			if m.ID == "" {
				if err != nil {
					errs = append(errs, err)
				}
				continue
			}
			rw := MigrateView{Saga: m.Saga, ID: m.ID, Handle: string(m.Handle), Type: m.Type, At: m.At,
				From: string(m.From), To: string(m.To), Outcome: string(m.Outcome)}
			if err != nil {
				rw.Error = err.Error()
				if m.Outcome == saga.MigrateFailed {
					failed++
				}
			}
			rows = append(rows, rw)
		}
	}
	if perr := c.out(rows, func(w *tabwriter.Writer) {
		if len(rows) == 0 {
			fmt.Fprintf(w, "no pending timeout of saga %s off engine %s: nothing to move\n", c.o.saga, c.o.to)
			return
		}
		fmt.Fprintln(w, "ID\tTYPE\tDUE\tOUTCOME\tFROM\tTO")
		for _, r := range rows {
			outcome := r.Outcome
			if r.Error != "" {
				outcome += ": " + r.Error
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, dash(r.Type), fmtTime(r.At), outcome, dash(r.From), dash(r.To))
		}
	}); perr != nil {
		return perr
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrPartial, errors.Join(errs...))
	}
	if failed > 0 {
		return fmt.Errorf("%w: %d of %d timeouts could not be moved and stay where they were; run again to retry", ErrPartial, failed, len(rows))
	}
	return nil
}

func cmdTimeoutsDrain(c *call) error {
	if c.o.saga == "" || c.o.engine == "" {
		return fmt.Errorf("%w: --saga and --engine are required", ErrUsage)
	}
	d, err := c.env.migrationDispatcher(c.ctx, c.o.saga, c.o.engine, c.o.queue)
	if err != nil {
		return err
	}
	v := DrainView{Saga: c.o.saga, Engine: c.o.engine, Drained: true, ByType: map[string]int{}, Pending: []PendingView{}, Stale: []PendingView{}}
	var rerr error
	if d != nil {
		r, err := d.DrainReport(c.ctx, c.o.saga, c.o.engine)
		rerr = err
		v.Drained, v.ByType = r.Drained(), r.ByType
		for _, st := range r.Pending {
			v.Pending = append(v.Pending, scheduledView(st))
		}
		for _, st := range r.Stale {
			v.Stale = append(v.Stale, scheduledView(st))
		}
	}
	if perr := c.out(v, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "engine %s holds %d timeouts of saga %s that instances wait for, %d stale copies (dropped if they fire)\n",
			v.Engine, len(v.Pending), v.Saga, len(v.Stale))
		for typ, n := range v.ByType {
			fmt.Fprintf(w, "  %s\t%d\n", typ, n)
		}
		if len(v.Pending)+len(v.Stale) > 0 {
			fmt.Fprintln(w, "DUE\tSTATE\tID\tTYPE\tREF")
			for _, p := range v.Pending {
				fmt.Fprintf(w, "%s\tpending\t%s\t%s\t%s\n", fmtTime(p.At), p.ID, dash(p.Type), p.Ref)
			}
			for _, p := range v.Stale {
				fmt.Fprintf(w, "%s\tstale\t%s\t%s\t%s\n", fmtTime(p.At), p.ID, dash(p.Type), p.Ref)
			}
		}
	}); perr != nil {
		return perr
	}
	if rerr != nil {
		return fmt.Errorf("%w: the listing is incomplete: %w", ErrPartial, rerr)
	}
	return nil
}

func scheduledView(st saga.ScheduledTimeout) PendingView {
	return PendingView{Engine: st.Ref.Engine(), Ref: string(st.Ref), Saga: st.Saga, ID: st.ID, Type: st.Type, At: st.At, Seq: st.Seq,
		TimeoutID: string(st.Handle), Activating: st.Activating}
}
