package saga

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// LatenessBounds are the upper bounds of the buckets in which
// RecentMinute.Late counts timeouts by how late their handler got them;
// the last bucket, one past these, counts the rest.
var LatenessBounds = []time.Duration{
	10 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 5 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute,
}

// RecentMinute is one minute of a dispatcher's work on one saga type, as
// its HealthRecord carries it (Recent): what the console draws as the
// last hour. Steps that waited for a dependency (Waiting) or were left to
// redelivery (Abandoned) are not counted: they run again.
type RecentMinute struct {
	// Minute is the minute's start (UTC).
	Minute time.Time `json:"minute"`
	// Saga is the saga type; empty for messages no saga took.
	Saga string `json:"saga,omitempty"`
	// Steps counts the messages settled in the minute, DeadLetters those
	// of them dead-lettered, Timeouts the timeouts among them.
	Steps       int `json:"steps"`
	DeadLetters int `json:"deadLetters,omitempty"`
	Timeouts    int `json:"timeouts,omitempty"`
	// Late counts the timeouts by lateness (the step's start minus the
	// due time) in the buckets of LatenessBounds: Late[i] those at most
	// LatenessBounds[i] late and more than the bound before; the last
	// element those later than every bound. Empty without timeouts.
	Late []int `json:"late,omitempty"`
}

// recentWindow is how far back a HealthRecord's Recent reaches.
const recentWindow = time.Hour

// recentStats counts a dispatcher's steps by minute and saga type for
// its health record.
type recentStats struct {
	mu      sync.Mutex
	minutes map[recentKey]*RecentMinute
	changed bool // a step was counted since the last snapshot
}

type recentKey struct {
	minute int64 // Unix minutes
	saga   string
}

// add counts a settled step.
func (r *recentStats) add(info *StepInfo, res StepResult) {
	if res.Outcome == Waiting || res.Outcome == Abandoned {
		return
	}
	k := recentKey{minute: info.StartedAt.Unix() / 60, saga: info.Saga}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.minutes == nil {
		r.minutes = map[recentKey]*RecentMinute{}
	}
	m := r.minutes[k]
	if m == nil {
		m = &RecentMinute{Minute: time.Unix(k.minute*60, 0).UTC(), Saga: k.saga}
		r.minutes[k] = m
	}
	r.changed = true
	m.Steps++
	if res.Outcome == DeadLettered {
		m.DeadLetters++
	}
	if info.TimeoutDue.IsZero() {
		return
	}
	m.Timeouts++
	if m.Late == nil {
		m.Late = make([]int, len(LatenessBounds)+1)
	}
	late := info.StartedAt.Sub(info.TimeoutDue)
	i, _ := slices.BinarySearch(LatenessBounds, late)
	m.Late[i]++
}

// snapshot returns the minutes within recentWindow of now, oldest first,
// and forgets older ones.
func (r *recentStats) snapshot(now time.Time) []RecentMinute {
	oldest := now.Add(-recentWindow).Unix() / 60
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]RecentMinute, 0, len(r.minutes))
	for k, m := range r.minutes {
		if k.minute <= oldest {
			delete(r.minutes, k)
			continue
		}
		c := *m
		c.Late = slices.Clone(m.Late)
		out = append(out, c)
	}
	r.changed = false
	slices.SortFunc(out, func(a, b RecentMinute) int {
		return cmp.Or(a.Minute.Compare(b.Minute), cmp.Compare(a.Saga, b.Saga))
	})
	return out
}

// hasNews reports whether a step was counted since the last snapshot.
func (r *recentStats) hasNews() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}
