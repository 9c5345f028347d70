package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/transport"
)

// StuckView is a stuck saga instance as jetsaga shows it: running, of a
// saga with saga.CheckLiveness, with no pending timeout and no expected
// message since its last step.
type StuckView struct {
	Saga    string    `json:"saga"`
	ID      string    `json:"id"`
	Started time.Time `json:"started"`
	Updated time.Time `json:"updated"` // the last step, which left it waiting for nothing
	// Data is the state: JSON as stored, or base64 for other codecs.
	Data       json.RawMessage `json:"data,omitempty"`
	DataBase64 []byte          `json:"data_base64,omitempty"`
}

// stuck lists the stuck instances of sagaType (of every saga type if
// empty) with saga.Dispatcher.StuckInstances, the API an application
// calls: on a dispatcher with the placeholder saga and the existing
// store (see records), which reads records and writes nothing.
func (e *env) stuck(ctx context.Context, sagaType string) ([]StuckView, error) {
	if sagaType != "" {
		if err := transport.ValidateQueueName(sagaType); err != nil {
			return nil, fmt.Errorf("%w: saga type %q: 1-64 characters of [A-Za-z0-9_-]", ErrUsage, sagaType)
		}
	}
	d, err := e.reader(ctx)
	if err != nil {
		return nil, err
	}
	out := []StuckView{}
	for inst, err := range d.StuckInstances(ctx, sagaType) {
		if err != nil {
			return out, err
		}
		v := StuckView{Saga: inst.Saga, ID: inst.ID, Started: inst.Started, Updated: inst.Updated}
		if json.Valid(inst.Data) {
			v.Data = inst.Data
		} else {
			v.DataBase64 = inst.Data
		}
		out = append(out, v)
	}
	return out, nil
}

// reader is a dispatcher with the placeholder saga and the existing
// store (see records), which reads records and writes nothing: for the
// listings a Dispatcher makes (StuckInstances, CallsInDoubt).
func (e *env) reader(ctx context.Context) (*saga.Dispatcher, error) {
	store, err := e.records(ctx)
	if err != nil {
		return nil, err
	}
	return saga.NewDispatcher(e.broker, store, placeholder.Name(), saga.WithSagas(placeholder), saga.WithLogger(e.rc.logger))
}

// ListKeys makes the operator's store a saga.ListingStore.
func (s kvStore) ListKeys(ctx context.Context, prefix string) iter.Seq2[string, error] {
	return kvstore.ListKeys(ctx, s.kv, prefix)
}

func cmdSagasStuck(c *call) error {
	sagaType := ""
	if len(c.args) > 0 {
		sagaType = c.args[0]
	}
	vs, err := c.env.stuck(c.ctx, sagaType)
	if err != nil {
		return err
	}
	err = c.out(vs, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "SAGA\tID\tSTARTED\tLAST STEP")
		for _, v := range vs {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", v.Saga, v.ID, fmtTime(v.Started), fmtTime(v.Updated))
		}
		w.Flush()
		fmt.Fprintf(c.stdout, "%d stuck instance(s)\n", len(vs))
	})
	if err == nil && len(vs) > 0 {
		return fmt.Errorf("%w: %d", ErrStuck, len(vs)) // exit 7, for checks run from cron
	}
	return err
}

func (c *console) stuckPage(r *http.Request) (string, string, any, error) {
	sagaType := r.URL.Query().Get("saga")
	vs, err := c.env.stuck(r.Context(), sagaType)
	return "stuck instances", "stuck", struct {
		Saga      string
		Instances []StuckView
	}{sagaType, vs}, err
}
