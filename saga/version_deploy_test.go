//go:build unix

package saga_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/testdata/deploy"
)

// TestRollingDeployOfTwoBinaries is TestRollingDeployOfDataVersion2 with
// real processes: two releases of a counter saga, built here with go
// build from testdata/deploy (release 1 counts; release 2 stores its data
// at version 2, with an upcaster from 1), on one queue of a real server,
// under a steady stream of adds from the test. Two release-1 workers run;
// two release-2 workers join; one release-1 worker is stopped with
// SIGTERM (gracefully) and the other killed with SIGKILL. Then:
//
//   - every instance ends with the sum of what was sent to it, at data
//     version 2, and the queue and its dead-letter queue are empty;
//   - no record written at version 2 is ever written again at version 1:
//     every write, by revision, as the workers' stores report them and as
//     a watch on the KV bucket sees them, never goes down in version;
//   - release 1's version waits happened and were counted by its hooks
//     (the SIGTERMed worker's count on stopping matches its steps).
//
// The binaries are built with -race when the test is.
func TestRollingDeployOfTwoBinaries(t *testing.T) {
	bins := buildReleases(t)
	srv := startServer(t)
	const instances = 12
	fleet := &fleet{t: t, url: srv.ClientURL(), bins: bins, puts: map[string][]deploy.Event{}}

	a, b := fleet.start("r1-a", 1), fleet.start("r1-b", 1)
	fleet.awaitReady(a, b)

	sender := newNode(t, srv.ClientURL())
	sd := sender.dispatcher(t, nil, "deploy-sender", saga.WithSagas(sendOnly())) // never run: it sends
	q, err := sender.broker.Queue(ctxFor(t), deploy.Queue)
	if err != nil {
		t.Fatal(err)
	}
	watch := watchVersions(t, sender)

	var sentMu sync.Mutex
	sent := make(map[string]int)
	var nsent atomic.Int64
	streamCtx, stopStream := context.WithCancel(t.Context())
	streamDone := make(chan struct{})
	go func() { // a steady stream of adds until the deploy is over
		defer close(streamDone)
		for i := 0; streamCtx.Err() == nil; i++ {
			id, n := fmt.Sprintf("c%d", i%instances), i%5+1
			// Not on streamCtx: a send cut short by the end of the stream
			// may have reached the queue all the same.
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			_, err := sd.SendTo(ctx, deploy.Queue, deploy.Add{ID: id, N: n}, saga.WithMessageID(fmt.Sprintf("add-%d", i)))
			cancel()
			if err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
			sentMu.Lock()
			sent[id] += n
			sentMu.Unlock()
			nsent.Add(1)
			select {
			case <-streamCtx.Done():
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	defer func() { stopStream(); <-streamDone }()
	sentAtLeast := func(n int64) func() bool { return func() bool { return nsent.Load() >= n } }

	testutil.AwaitTrue(t, 30*time.Second, "release 1 writes records", func() bool { return fleet.written(1) > 0 })
	c, d := fleet.start("r2-c", 2), fleet.start("r2-d", 2)
	fleet.awaitReady(c, d)
	testutil.AwaitTrue(t, 30*time.Second, "release 2 writes records, and release 1 takes 20 messages after", func() bool {
		return fleet.release1StepsAfterRelease2() >= 20
	})
	fleet.terminate(a)
	mark := nsent.Load()
	testutil.AwaitTrue(t, 30*time.Second, "50 adds more sent", sentAtLeast(mark+50))
	fleet.kill(b)
	mark = nsent.Load()
	testutil.AwaitTrue(t, 30*time.Second, "100 adds more sent", sentAtLeast(mark+100))
	stopStream()
	<-streamDone
	reported := false // overwrites: once, before the wait for the totals that they would break
	checkOverwrites := func() {
		if o := fleet.overwrites(watch.seen()); len(o) > 0 && !reported {
			reported = true
			t.Errorf("records written at version 2 written again at version 1:\n%s", strings.Join(o, "\n"))
		}
	}
	checkOverwrites()

	testutil.Await(t, 60*time.Second, func() string {
		sentMu.Lock()
		defer sentMu.Unlock()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		for id, want := range sent {
			v, _, err := sender.store.Load(ctx, saga.StoreKey(deploy.Saga, id))
			if err != nil {
				return fmt.Sprintf("%s: %v", id, err)
			}
			var r struct {
				Data struct{ Total int }
			}
			if err := json.Unmarshal(v, &r); err != nil {
				t.Fatalf("%s: record %s: %v", id, v, err)
			}
			if got := deploy.RecordVersion(v); r.Data.Total != want || got != 2 {
				return fmt.Sprintf("%s: total %d at data version %d, want %d at version 2", id, r.Data.Total, got, want)
			}
		}
		if why := queueEmpty(t, q); why != "" {
			return why
		}
		return queueEmpty(t, q.DeadLetterQueue())
	})
	fleet.terminate(c)
	fleet.terminate(d)

	checkOverwrites()
	waits := fleet.versionWaits(a) + fleet.versionWaits(b)
	if waits == 0 {
		t.Errorf("release 1 reported no version wait")
	}
	if n, want := a.stopped.Outcomes[saga.VersionWait], fleet.versionWaits(a); n != want {
		t.Errorf("%s counted %d version waits on stopping, and reported %d steps with that outcome", a.name, n, want)
	}
	if n := fleet.versionWaits(c) + fleet.versionWaits(d); n > 0 {
		t.Errorf("release 2 waited %d times for a newer version", n)
	}
	t.Logf("%d adds to %d instances; release 1 waited %d times (%s: %d before SIGTERM, %s: %d before SIGKILL); writes by version: %v; the KV watch saw %d of them",
		nsent.Load(), instances, waits, a.name, fleet.versionWaits(a), b.name, fleet.versionWaits(b), fleet.writesByVersion(), len(watch.seen()))
}

// sendOnly is the saga of a dispatcher that is never run, only sends:
// a dispatcher needs one.
func sendOnly() saga.Saga {
	d := saga.Define[struct{}]("deploy-sender")
	saga.StartedBy(d, saga.By(func(m deploy.Add) string { return m.ID }),
		func(context.Context, *saga.Context[struct{}], deploy.Add) error { return nil })
	return d
}

// buildReleases builds the two releases of testdata/deploy and returns
// their paths by release number, with -race when the test binary has it
// (its packages are then in the build cache already).
func buildReleases(t *testing.T) map[int]string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command, to build the releases: %v", err)
	}
	dir := t.TempDir()
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if bi, ok := debug.ReadBuildInfo(); ok && slices.Contains(bi.Settings, debug.BuildSetting{Key: "-race", Value: "true"}) {
		args = append(args, "-race")
	}
	args = append(args, "./testdata/deploy/release1", "./testdata/deploy/release2")
	start := time.Now()
	if out, err := exec.CommandContext(t.Context(), gobin, args...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("go %s: %v", strings.Join(args[3:], " "), time.Since(start).Round(time.Millisecond))
	return map[int]string{1: filepath.Join(dir, "release1"), 2: filepath.Join(dir, "release2")}
}

// fleet is the worker processes of TestRollingDeployOfTwoBinaries and
// what they reported.
type fleet struct {
	t    *testing.T
	url  string
	bins map[int]string

	mu    sync.Mutex
	puts  map[string][]deploy.Event // by key
	steps []deploy.Event
	// stepsAfter counts release 1's steps reported after the first
	// write of release 2 was.
	release2Wrote bool
	stepsAfter    int
}

// process is one worker process.
type process struct {
	name    string
	release int
	cmd     *exec.Cmd
	stdin   io.Closer
	stderr  *testutil.Buffer
	ready   atomic.Bool
	exited  chan struct{} // closed once stdout is read to its end and Wait returned
	waitErr error
	stopped *deploy.Event // the "stopped" line, if any
}

// start starts a worker of the release and reads its lines until it exits.
// The test's cleanup kills it if it still runs.
func (f *fleet) start(name string, release int) *process {
	f.t.Helper()
	p := &process{name: name, release: release, stderr: new(testutil.Buffer), exited: make(chan struct{})}
	p.cmd = exec.Command(f.bins[release], "-nats", f.url, "-name", name)
	p.cmd.Stderr = p.stderr
	stdin, err := p.cmd.StdinPipe() // closed: the worker stops
	if err != nil {
		f.t.Fatal(err)
	}
	p.stdin = stdin
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		f.t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e deploy.Event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				f.t.Errorf("%s: a line that is not an event: %q", name, sc.Text())
				continue
			}
			f.record(p, e)
		}
		p.waitErr = p.cmd.Wait()
	}()
	f.t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if f.t.Failed() && p.stderr.String() != "" {
			f.t.Logf("%s stderr:\n%s", name, p.stderr.String())
		}
	})
	return p
}

func (f *fleet) record(p *process, e deploy.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch e.Event {
	case "ready":
		p.ready.Store(true)
	case "put":
		f.puts[e.Key] = append(f.puts[e.Key], e)
		f.release2Wrote = f.release2Wrote || e.Version == 2
	case "step":
		f.steps = append(f.steps, e)
		if f.release2Wrote && p.release == 1 {
			f.stepsAfter++
		}
	case "stopped":
		p.stopped = &e
	}
}

func (f *fleet) awaitReady(ps ...*process) {
	f.t.Helper()
	for _, p := range ps {
		testutil.Await(f.t, 30*time.Second, func() string {
			select {
			case <-p.exited:
				f.t.Fatalf("%s exited before it was ready: %v\n%s", p.name, p.waitErr, p.stderr.String())
			default:
			}
			if !p.ready.Load() {
				return p.name + " not ready"
			}
			return ""
		})
	}
}

// terminate stops p with SIGTERM and checks that it stopped gracefully:
// exit 0, after its "stopped" line.
func (f *fleet) terminate(p *process) {
	f.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		f.t.Fatalf("SIGTERM %s: %v", p.name, err)
	}
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		f.t.Fatalf("%s did not stop within 30s of SIGTERM", p.name)
	}
	if p.waitErr != nil || p.stopped == nil {
		f.t.Fatalf("%s after SIGTERM: %v, stopped line %v; want exit 0 after it\n%s", p.name, p.waitErr, p.stopped, p.stderr.String())
	}
}

// kill kills p with SIGKILL, mid-step as likely as not.
func (f *fleet) kill(p *process) {
	f.t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		f.t.Fatalf("SIGKILL %s: %v", p.name, err)
	}
	<-p.exited
	var ee *exec.ExitError
	if !errors.As(p.waitErr, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		f.t.Fatalf("%s: %v, want killed by SIGKILL", p.name, p.waitErr)
	}
}

// written counts the records written at data version v.
func (f *fleet) written(v int) int {
	return f.writesByVersion()[v]
}

// release1StepsAfterRelease2 counts the steps release 1 reported after
// the first record release 2 wrote.
func (f *fleet) release1StepsAfterRelease2() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stepsAfter
}

func (f *fleet) writesByVersion() map[int]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[int]int{}
	for _, es := range f.puts {
		for _, e := range es {
			out[e.Version]++
		}
	}
	return out
}

// versionWaits counts p's steps that ended in a version wait, and fails
// the test for one whose error does not match ErrDataVersionAhead.
func (f *fleet) versionWaits(p *process) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, e := range f.steps {
		if e.Worker == p.name && e.Outcome == saga.VersionWait {
			if !e.Ahead {
				f.t.Errorf("%s: a version wait on %s whose error does not match ErrDataVersionAhead", p.name, e.ID)
			}
			n++
		}
	}
	return n
}

// overwrites lists, for each record, the writes at a lower data version
// than the write before it by revision: the writes the workers reported,
// and those the KV watch saw (which a SIGKILLed worker may not have
// reported), which must agree where both saw a revision.
func (f *fleet) overwrites(watched []deploy.Event) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	type write struct {
		rev     uint64
		version int
		by      string
	}
	byKey := map[string]map[uint64]write{}
	add := func(e deploy.Event, by string) string {
		m := byKey[e.Key]
		if m == nil {
			m = map[uint64]write{}
			byKey[e.Key] = m
		}
		if w, ok := m[e.Rev]; ok && w.version != e.Version {
			return fmt.Sprintf("%s revision %d: version %d by %s, version %d by %s", e.Key, e.Rev, w.version, w.by, e.Version, by)
		}
		if _, ok := m[e.Rev]; !ok {
			m[e.Rev] = write{e.Rev, e.Version, by}
		}
		return ""
	}
	var out []string
	for _, es := range f.puts {
		for _, e := range es {
			if why := add(e, e.Worker); why != "" {
				out = append(out, why)
			}
		}
	}
	for _, e := range watched {
		if why := add(e, "the KV watch"); why != "" {
			out = append(out, why)
		}
	}
	for key, m := range byKey {
		ws := slices.SortedFunc(func(yield func(write) bool) {
			for _, w := range m {
				if !yield(w) {
					return
				}
			}
		}, func(a, b write) int { return int(a.rev) - int(b.rev) })
		for i := 1; i < len(ws); i++ {
			if ws[i].version < ws[i-1].version {
				out = append(out, fmt.Sprintf("%s: revision %d (version %d, by %s) after revision %d (version %d, by %s)",
					key, ws[i].rev, ws[i].version, ws[i].by, ws[i-1].rev, ws[i-1].version, ws[i-1].by))
			}
		}
	}
	return out
}

// versionWatch is a watch on the saga bucket: every revision it saw of
// each record, with the data version the record carries. A record written
// again before the watch reads it is seen at its later revision only (the
// bucket keeps one revision a key).
type versionWatch struct {
	mu   sync.Mutex
	puts []deploy.Event
}

func watchVersions(t *testing.T, n *node) *versionWatch {
	t.Helper()
	js, err := jetstream.New(n.nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctxFor(t), "jetsaga_sagas")
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.WatchAll(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	vw := &versionWatch{}
	go func() {
		for e := range w.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			vw.mu.Lock()
			vw.puts = append(vw.puts, deploy.Event{Key: e.Key(), Rev: e.Revision(), Version: deploy.RecordVersion(e.Value())})
			vw.mu.Unlock()
		}
	}()
	return vw
}

func (w *versionWatch) seen() []deploy.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.puts)
}
