package main

import (
	"context"
	"fmt"
	"time"
)

// P4 (cancel part): Queue.Cancel of pending far-future schedules, one at a
// time, against two raw baselines: DeleteMsg, the plain way to remove a
// schedule (one request, but it cannot tell "cancelled" from "already
// fired" race-free), and the same guarded purge the transport sends, done
// by hand (GetMsg, then a publish with an expected subject sequence). The
// three alternate call by call, so they see the same conditions.

func benchCancel(ctx context.Context, e *env) ([]Result, error) {
	n := e.scaled(cancelCount)
	q, drop, err := e.openQueue(ctx, "cancel")
	if err != nil {
		return nil, err
	}
	defer drop()
	delStream, delPrefix := rawNames("S", "cdel")
	grdStream, grdPrefix := rawNames("S", "cgrd")
	del, err := e.rawScheduleStream(ctx, delStream, delPrefix)
	if err != nil {
		return nil, err
	}
	defer e.dropStream(ctx, delStream)
	grd, err := e.rawScheduleStream(ctx, grdStream, grdPrefix)
	if err != nil {
		return nil, err
	}
	defer e.dropStream(ctx, grdStream)

	// Schedule n on each side, untimed.
	due := time.Now().Add(time.Hour)
	ids := newIDs(n)
	jetSeq, delSeq, grdSeq := make([]uint64, n), make([]uint64, n), make([]uint64, n)
	if err := parallel(e.cfg.conc, n, func(i int) error {
		var err error
		if jetSeq[i], err = q.Schedule(ctx, jetMessage(ids[i]), due); err != nil {
			return err
		}
		ack, err := e.js.PublishMsg(ctx, rawScheduleMsg(delPrefix, ids[i], due))
		if err != nil {
			return err
		}
		delSeq[i] = ack.Sequence
		if ack, err = e.js.PublishMsg(ctx, rawScheduleMsg(grdPrefix, ids[i], due)); err != nil {
			return err
		}
		grdSeq[i] = ack.Sequence
		return nil
	}); err != nil {
		return nil, fmt.Errorf("scheduling: %w", err)
	}

	sides := []struct {
		label  string
		cancel func(i int) error
		lat    []time.Duration
	}{
		{"jetsaga", func(i int) error { return q.Cancel(ctx, jetSeq[i]) }, nil},
		{"raw DeleteMsg", func(i int) error { return del.DeleteMsg(ctx, delSeq[i]) }, nil},
		{"raw guarded purge", func(i int) error { return rawGuardedCancel(ctx, e.js, grd, grdPrefix, grdSeq[i]) }, nil},
	}
	for i := range n {
		for k := range sides {
			s := &sides[(i+k)%len(sides)]
			start := time.Now()
			err := s.cancel(i)
			s.lat = append(s.lat, time.Since(start))
			if err != nil {
				return nil, fmt.Errorf("%s: cancel %d: %w", s.label, i, err)
			}
		}
	}
	jet := summarize(sides[0].lat)
	const maxP99, target = time.Millisecond, "p99 <= 1ms (P4)"
	r1 := latencyResult("cancel", fmt.Sprintf("cancel (%d pending) vs DeleteMsg", n), jet, summarize(sides[1].lat), maxP99, target)
	r2 := latencyResult("cancel", "  vs raw guarded purge", jet, summarize(sides[2].lat), maxP99, target)
	r2.RawName = "raw guarded purge"
	r2.RawDesc = "GetMsg, then a publish of the purge record with WithExpectLastSequenceForSubject: the calls transport's cancel makes"
	return []Result{r1, r2}, nil
}
