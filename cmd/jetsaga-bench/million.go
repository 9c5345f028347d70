package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// P4 and P7: a million pending timeouts (1M × -n), due within -spread.
// Opt-in (-only million): it takes minutes.
//
// Each side runs in a child process of its own (this binary, re-executed
// with -child) with an embedded nats-server of its own, so that the
// process RSS of each (server and client together) is comparable: first
// the raw side, then jetsaga, never both at once. Each child
//
//  1. schedules n messages with 64 goroutines, due evenly over -spread
//     from about 20 s after the scheduling ends (a pilot estimates how
//     long it takes);
//  2. reads its RSS (VmRSS) with all pending, and the peak so far (VmHWM);
//  3. cancels a random 2000, one at a time, timing each;
//  4. receives the rest as they fire, checks that each arrives once and
//     never early and no cancelled one does, and records the drain over
//     time (received and activated per 250 ms from the first due time);
//  5. reports its peak RSS (VmHWM) over the whole run, and the phase in
//     which its RSS was highest (sampled every 250 ms).
//
// The raw side is what a hand-written program does with nats.go: one
// schedule stream configured like the transport's, schedules targeting a
// subject of that stream, cancels as the transport's guarded purge, and a
// plain pull consumer (Messages iterator, Ack) on the activations.
// jetsaga's side is Queue.Schedule, Queue.Cancel and Receive(100) with 8
// goroutines, each completing its batch with up to 16 concurrent
// Completes, on a queue with -million-partitions partitions. With
// -million-complete-nowait they complete with CompleteNoWait instead (an
// ack without reply, as raw's Ack, and as the saga dispatcher completes a
// message every saga committed).

const (
	millionCount        = 1_000_000
	millionSchedConc    = 64 // goroutines scheduling
	millionRecvConc     = 8  // goroutines receiving (jetsaga)
	millionCompleteConc = 16 // concurrent Completes per receiving goroutine
	millionLead         = 20 * time.Second
	millionBucket       = 250 * time.Millisecond
	// cancelP99Target is P4's cancel p99 with 1M pending; the children
	// report when each cancel slower than that began.
	cancelP99Target = 2 * time.Millisecond
)

// millionReport is what a child process measured, sent to the parent as
// JSON on its stdout.
type millionReport struct {
	Side       string        `json:"side"`
	N          int           `json:"n"`
	Partitions int           `json:"partitions,omitempty"`
	Cancelled  int           `json:"cancelled"`
	SchedRate  float64       `json:"schedule_rate_per_s"`
	SchedDur   time.Duration `json:"schedule_ns"`
	Margin     time.Duration `json:"margin_ns"` // first due - end of scheduling

	RSSSched  int64  `json:"rss_scheduled_bytes"` // VmRSS with all pending
	HWMSched  int64  `json:"peak_rss_scheduled_bytes"`
	HeapSched int64  `json:"go_heap_scheduled_bytes"`
	RSSPeak   int64  `json:"peak_rss_bytes"` // VmHWM at the end
	PeakPhase string `json:"peak_phase"`

	Cancel *Latency `json:"cancel"`
	// CancelWarm: as many cancels again at once after the first, when
	// the file store holds the blocks the first ones loaded.
	CancelWarm *Latency `json:"cancel_warm,omitempty"`

	Got         int      `json:"received"`
	Dups        int      `json:"duplicates"`
	Early       int      `json:"early"`
	Resurrected int      `json:"cancelled_fired"`
	Late        *Latency `json:"lateness_received"` // received - due
	EnqLate     *Latency `json:"lateness_enqueued"` // activated - due

	// Drain is the time from the first due time to the last receipt;
	// LastAfterDue from the last due time to the last receipt.
	Drain        time.Duration `json:"drain_ns"`
	LastAfterDue time.Duration `json:"last_received_after_last_due_ns"`
	// BurstCPU is the process's CPU time (server and client, user and
	// system) from the end of the cancels to the end of receiving (the last
	// receipt and a 2 s grace); BurstGC the GC cycles and BurstAlloc the
	// bytes allocated meanwhile.
	BurstCPU   time.Duration `json:"burst_cpu_ns"`
	BurstGC    uint32        `json:"burst_gc_cycles"`
	BurstAlloc uint64        `json:"burst_alloc_bytes"`

	// Counts per Bucket from the first due time: due, activated
	// (enqueued), received; RSS sampled at the start of each bucket (MiB).
	Bucket   time.Duration `json:"bucket_ns"`
	Due      []int         `json:"due"`
	Enqueued []int         `json:"enqueued"`
	Received []int         `json:"received_per_bucket"`
	RSSMiB   []int         `json:"rss_mib"`
}

func benchMillion(ctx context.Context, e *env) ([]Result, error) {
	n := e.scaled(millionCount)
	start := time.Now()
	raw, err := runMillionChild(ctx, e, "raw")
	if err != nil {
		return nil, fmt.Errorf("raw: %w", err)
	}
	jet, err := runMillionChild(ctx, e, "jetsaga")
	if err != nil {
		return nil, fmt.Errorf("jetsaga: %w", err)
	}
	e.charts.burst = []*millionReport{jet, raw}

	mib := func(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }
	ratio := func(a, b float64) float64 {
		if b <= 0 {
			return 0
		}
		return a / b
	}
	rssRatio := ratio(float64(jet.RSSSched), float64(raw.RSSSched))
	peakRatio := ratio(float64(jet.RSSPeak), float64(raw.RSSPeak))
	drainRatio := ratio(float64(jet.Drain), float64(raw.Drain))
	label := fmt.Sprintf("million: Schedule %d (%d goroutines", n, millionSchedConc)
	if jet.Partitions > 1 {
		label += fmt.Sprintf(", %d partitions", jet.Partitions)
	}
	if e.cfg.millionNoWait {
		label += ", CompleteNoWait"
	}
	label += ")"
	sched := func(r *millionReport) Figure {
		return Figure{Text: fmt.Sprintf("%s (%s; first due %s later)", fmtRate(r.SchedRate), fmtDur(r.SchedDur), fmtDur(r.Margin))}
	}
	rs := sched(raw)
	res := []Result{
		{
			Bench: "million", Label: label, Jetsaga: sched(jet), Raw: &rs,
			Ratio:  ratio(jet.SchedRate, raw.SchedRate),
			Target: "all pending before the first due",
			Pass:   verdict(jet.Margin > 0 && raw.Margin > 0),
		},
		{
			Bench: "million", Label: fmt.Sprintf("  process RSS, %d pending (own process each)", n),
			Jetsaga: Figure{Text: fmt.Sprintf("%s (Go heap %s)", mib(jet.RSSSched), mib(jet.HeapSched))},
			Raw:     &Figure{Text: fmt.Sprintf("%s (Go heap %s)", mib(raw.RSSSched), mib(raw.HeapSched))},
			Ratio:   rssRatio,
			Target:  "<= 1.25x raw (P4)",
			Pass:    verdict(rssRatio <= 1.25),
		},
		{
			Bench: "million", Label: "  peak RSS over the whole run",
			Jetsaga: Figure{Text: fmt.Sprintf("%s (%s)", mib(jet.RSSPeak), jet.PeakPhase)},
			Raw:     &Figure{Text: fmt.Sprintf("%s (%s)", mib(raw.RSSPeak), raw.PeakPhase)},
			Ratio:   peakRatio,
			Target:  "<= 1.5x raw (P4)",
			Pass:    verdict(peakRatio <= 1.5),
		},
		latencyResult("million", fmt.Sprintf("  cancel %d of %d pending", jet.Cancel.Count, n), jet.Cancel, raw.Cancel, cancelP99Target, "p99 <= 2ms (P4)"),
		latencyResult("million", fmt.Sprintf("  cancel %d more at once (blocks cached)", jet.CancelWarm.Count), jet.CancelWarm, raw.CancelWarm, 0, ""),
		{
			Bench: "million", Label: fmt.Sprintf("  burst: last received, from the first due (%v window)", e.cfg.spread),
			Jetsaga: Figure{Text: fmt.Sprintf("%s (%s after the last due)", fmtDur(jet.Drain), fmtDur(jet.LastAfterDue))},
			Raw:     &Figure{Text: fmt.Sprintf("%s (%s after the last due)", fmtDur(raw.Drain), fmtDur(raw.LastAfterDue))},
			Ratio:   drainRatio,
			Target:  "<= 1.25x raw (P7)",
			Pass:    verdict(drainRatio <= 1.25 && jet.Got == jet.N-jet.Cancelled),
		},
		{
			Bench: "million", Label: "  burst: process CPU (server and client), GC",
			Jetsaga: Figure{Text: burstCPU(jet)},
			Raw:     &Figure{Text: burstCPU(raw)},
			Ratio:   ratio(float64(jet.BurstCPU), float64(raw.BurstCPU)),
		},
		latencyResult("million", "  burst: lateness enqueued-due", jet.EnqLate, raw.EnqLate, 0, ""),
		latencyResult("million", "  burst: lateness received-due", jet.Late, raw.Late, 0, ""),
		{
			Bench: "million", Label: "  burst: counts",
			Jetsaga: Figure{Text: millionCounts(jet)},
			Raw:     &Figure{Text: millionCounts(raw)},
			Target:  "all fire, 0 dup/early (P4)",
			Pass:    verdict(jet.Got == jet.N-jet.Cancelled && jet.Dups == 0 && jet.Early == 0 && jet.Resurrected == 0),
		},
		{
			Bench: "million", Label: "  whole bench (both sides)",
			Jetsaga: Figure{Text: fmtDur(time.Since(start))},
		},
	}
	res[4].RawName = "raw"
	res[4].RawDesc = "one schedule stream configured as the transport's, schedules targeting a subject of it, guarded-purge cancels, a plain pull consumer (Messages, Ack) on the activations; in a process of its own with its own embedded server, as jetsaga's side"
	return res, nil
}

func burstCPU(r *millionReport) string {
	if r.BurstCPU == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%s CPU, %d GC cycles, %d MiB allocated", fmtDur(r.BurstCPU), r.BurstGC, r.BurstAlloc>>20)
}

func millionCounts(r *millionReport) string {
	want := r.N - r.Cancelled
	return fmt.Sprintf("%d of %d, %d lost, %d dup, %d early, %d cancelled fired", r.Got, want, want-r.Got, r.Dups, r.Early, r.Resurrected)
}

// runMillionChild runs one side in a child process, passing its progress
// through to stderr, and returns its report.
func runMillionChild(ctx context.Context, e *env, side string) (*millionReport, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"-child", "million-" + side,
		"-n", strconv.FormatFloat(e.cfg.scale, 'g', -1, 64),
		"-spread", e.cfg.spread.String(),
		"-million-partitions", strconv.Itoa(e.cfg.millionParts),
	}
	if e.cfg.millionNoWait {
		args = append(args, "-million-complete-nowait")
	}
	if e.cfg.millionLead > 0 {
		args = append(args, "-million-lead", e.cfg.millionLead.String())
	}
	if e.cfg.millionSettle > 0 {
		args = append(args, "-million-settle", e.cfg.millionSettle.String())
	}
	if e.cfg.cpuProfile != "" {
		args = append(args, "-cpuprofile", e.cfg.cpuProfile+"."+side)
	}
	if e.cfg.memProfile != "" {
		args = append(args, "-memprofile", e.cfg.memProfile+"."+side)
	}
	if e.cfg.burstProfile != "" {
		args = append(args, "-burstprofile", e.cfg.burstProfile+"."+side)
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	e.progress("  %s: starting its own process and server", side)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(errPipe)
	for sc.Scan() {
		e.progress("  %s: %s", side, sc.Text())
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("child process: %w", err)
	}
	var r millionReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("child report: %w", err)
	}
	return &r, nil
}

// readRSS returns the process's resident set size and its peak, in bytes.
func readRSS() (rss, hwm int64, err error) {
	fh, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0, err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/self/status %s: %w", key, err)
		}
		if key == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	if rss == 0 {
		return 0, 0, errors.Join(errors.New("no VmRSS in /proc/self/status"), sc.Err())
	}
	return rss, hwm, sc.Err()
}
