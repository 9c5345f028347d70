package pgstore_test

import (
	"testing"

	"github.com/jetsaga/jetsaga/saga"
)

// TestIndexedStepRoundTrips counts the round trips to PostgreSQL of the
// steps of a saga with two indexes (one unique), beside the same saga
// without them: a step that starts an instance writes its two index
// entries in its COMMIT's batch, with its record, so that it costs the
// two round trips of a step without indexes (BEGIN+SELECT+nextval, then
// the writes+COMMIT); so does a step whose values do not change.
func TestIndexedStepRoundTrips(t *testing.T) {
	for _, indexed := range []bool{false, true} {
		name := "plain"
		if indexed {
			name = "indexed"
		}
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			count, _, store, broker := countedStore(t)
			const queue = "ixtrips"
			def := ixCounterSaga(indexed)
			d, handleNext := stepper(t, broker, store, queue, def)
			step := func(instance string) int64 {
				t.Helper()
				if _, err := d.Send(ctx, tick{Instance: instance}); err != nil {
					t.Fatal(err)
				}
				t0 := count.trips.Load()
				if res := handleNext(); res.Outcome != saga.Handled {
					t.Fatalf("step on %s: %s, %v", instance, res.Outcome, res.Err)
				}
				return count.trips.Load() - t0
			}
			step("warm-1") // the connection's statement cache
			step("warm-1")
			if trips := step("inst-12"); trips != 2 {
				t.Errorf("a step that starts an instance: %d round trips, want 2", trips)
			}
			if trips := step("inst-12"); trips != 2 {
				t.Errorf("a step whose values do not change: %d round trips, want 2", trips)
			}
			if indexed {
				for _, q := range []saga.Query{saga.Where("key", "inst-12"), saga.Where("group", "inst-1")} {
					var ids []string
					for inst, err := range saga.Find(ctx, d, def, q) {
						if err != nil {
							t.Fatal(err)
						}
						ids = append(ids, inst.ID)
					}
					if len(ids) != 1 || ids[0] != "inst-12" {
						t.Errorf("Find(%v): got %q, want [inst-12]", q, ids)
					}
				}
			}
		})
	}
}
