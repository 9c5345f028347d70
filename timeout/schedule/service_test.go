package schedule_test

import (
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/timeout/schedule"
)

// A Scheduler runs beside a saga dispatcher (saga.WithService), as
// docs/schedules.md says.
var _ saga.Service = (*schedule.Scheduler)(nil)
