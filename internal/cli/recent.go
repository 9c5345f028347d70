package cli

import (
	"fmt"
	"time"

	"github.com/jetsaga/jetsaga/saga"
)

// RecentHour is the last hour of a queue's (or a saga type's) steps by
// minute, summed over the health records of the dispatchers running now
// (saga.HealthRecord.Recent), as the console draws it: steps with the
// dead-lettered ones among them, and how late timeouts' handlers got them
// (the 99th percentile, as the bucket of saga.LatenessBounds it falls
// in).
type RecentHour struct {
	Minutes     []RecentBar
	Steps       int
	DeadLetters int
	Timeouts    int
	// P99 is the hour's 99th percentile of lateness, as a bucket label
	// ("≤ 250ms"); empty without timeouts.
	P99         string
	Dispatchers int
	// MaxSteps is the largest minute's steps; the charts are drawn in a
	// viewBox of Width×Height.
	MaxSteps      int
	Width, Height int
	// LateLabels label the lateness chart's levels, bottom up.
	LateLabels []LateLabel
}

// RecentBar is one minute.
type RecentBar struct {
	Label                        string // "15:04" UTC
	Steps, DeadLetters, Timeouts int
	P99                          string // bucket label; empty without timeouts
	late                         []int
	// X, W place the minute; StepsY/StepsH the steps' bar, DeadY/DeadH
	// the dead letters' part of it, LateY/LateH the lateness bar.
	X, W, StepsY, StepsH, DeadY, DeadH, LateY, LateH int
}

// LateLabel is a level of the lateness chart.
type LateLabel struct {
	Y     int
	Label string
}

// latenessLabel names bucket i of saga.LatenessBounds.
func latenessLabel(i int) string {
	if i >= len(saga.LatenessBounds) {
		return "> " + shortDuration(saga.LatenessBounds[len(saga.LatenessBounds)-1])
	}
	return "≤ " + shortDuration(saga.LatenessBounds[i])
}

// shortDuration writes d in its largest whole unit: 250ms, 5s, 1m.
func shortDuration(d time.Duration) string {
	switch {
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}

// p99Bucket is the bucket the 99th percentile of counts falls in, -1
// without counts.
func p99Bucket(counts []int) int {
	total := 0
	for _, n := range counts {
		total += n
	}
	if total == 0 {
		return -1
	}
	need := (total*99 + 99) / 100 // the rank of the 99th percentile, rounded up
	seen := 0
	for i, n := range counts {
		if seen += n; seen >= need {
			return i
		}
	}
	return len(counts) - 1
}

// recentHour sums the records' minutes of sagaName (every saga type if
// empty) into the 60 minutes before now.
func recentHour(records []saga.HealthRecord, sagaName string, now time.Time) RecentHour {
	rh := RecentHour{Dispatchers: len(records), Width: 960, Height: 120}
	first := now.UTC().Truncate(time.Minute).Add(-59 * time.Minute)
	for i := range 60 {
		rh.Minutes = append(rh.Minutes, RecentBar{Label: first.Add(time.Duration(i) * time.Minute).Format("15:04")})
	}
	hour := make([]int, len(saga.LatenessBounds)+1)
	for _, rec := range records {
		for _, m := range rec.Recent {
			if sagaName != "" && m.Saga != sagaName {
				continue
			}
			i := int(m.Minute.Sub(first) / time.Minute)
			if i < 0 || i >= len(rh.Minutes) {
				continue
			}
			b := &rh.Minutes[i]
			b.Steps += m.Steps
			b.DeadLetters += m.DeadLetters
			b.Timeouts += m.Timeouts
			if len(m.Late) == len(hour) {
				if b.late == nil {
					b.late = make([]int, len(hour))
				}
				for j, n := range m.Late {
					b.late[j] += n
					hour[j] += n
				}
			}
		}
	}
	levels := len(hour) // the lateness chart: a level per bucket
	w := rh.Width / len(rh.Minutes)
	for i := range rh.Minutes {
		b := &rh.Minutes[i]
		rh.Steps += b.Steps
		rh.DeadLetters += b.DeadLetters
		rh.Timeouts += b.Timeouts
		rh.MaxSteps = max(rh.MaxSteps, b.Steps)
		if k := p99Bucket(b.late); k >= 0 {
			b.P99 = latenessLabel(k)
			b.LateH = (k + 1) * rh.Height / levels
		}
	}
	for i := range rh.Minutes {
		b := &rh.Minutes[i]
		b.X, b.W = i*w, max(w-1, 1)
		if rh.MaxSteps > 0 {
			b.StepsH = max(b.Steps*(rh.Height-10)/rh.MaxSteps, min(b.Steps, 1))
			b.DeadH = max(b.DeadLetters*(rh.Height-10)/rh.MaxSteps, min(b.DeadLetters, 1))
		}
		b.StepsY, b.DeadY, b.LateY = rh.Height-b.StepsH, rh.Height-b.DeadH, rh.Height-b.LateH
	}
	if k := p99Bucket(hour); k >= 0 {
		rh.P99 = latenessLabel(k)
	}
	for k := 0; k < levels; k += 3 {
		rh.LateLabels = append(rh.LateLabels, LateLabel{Y: rh.Height - (k+1)*rh.Height/levels + 10, Label: latenessLabel(k)})
	}
	return rh
}

// String says the hour in a line, for the console's summary.
func (rh RecentHour) String() string {
	s := fmt.Sprintf("In the last hour: %d steps, %d dead-lettered, %d timeouts", rh.Steps, rh.DeadLetters, rh.Timeouts)
	if rh.P99 != "" {
		s += fmt.Sprintf(", their handlers' lateness p99 %s", rh.P99)
	}
	return s + fmt.Sprintf(" (from the %d dispatchers running now)", rh.Dispatchers)
}
