// Command release1 is release 1 of the counter saga of
// TestRollingDeployOfTwoBinaries: its data has no version (version 1).
package main

import (
	"context"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/testdata/deploy"
)

type counter struct{ Count int }

func main() {
	def := saga.Define[counter](deploy.Saga)
	saga.StartedBy(def, saga.By(func(m deploy.Add) string { return m.ID }),
		func(_ context.Context, c *saga.Context[counter], m deploy.Add) error {
			c.Data.Count += m.N
			return nil
		})
	deploy.Main(def)
}
