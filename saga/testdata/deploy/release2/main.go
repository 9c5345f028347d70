// Command release2 is release 2 of the counter saga of
// TestRollingDeployOfTwoBinaries: its data is version 2, Count renamed
// Total, and a count of the adds version 2 handled; an upcaster reads
// version 1's records.
package main

import (
	"context"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/testdata/deploy"
)

// counterV1 is release 1's data, kept for the upcaster.
type counterV1 struct{ Count int }

type counter struct {
	Total int // counterV1.Count
	Adds  int // adds handled by version 2
}

func main() {
	def := saga.Define[counter](deploy.Saga, saga.DataVersion(2,
		saga.Upcast(func(old counterV1) (counter, error) { return counter{Total: old.Count}, nil })))
	saga.StartedBy(def, saga.By(func(m deploy.Add) string { return m.ID }),
		func(_ context.Context, c *saga.Context[counter], m deploy.Add) error {
			c.Data.Total += m.N
			c.Data.Adds++
			return nil
		})
	deploy.Main(def)
}
