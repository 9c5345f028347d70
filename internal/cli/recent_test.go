package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
)

type (
	RecentStart struct{ ID string }
	RecentBad   struct{ ID string }
	RecentDue   struct{}
	RecentEnd   struct{}
)

// The queue page's and the saga page's "last hour": steps by minute with
// the dead-lettered ones, and timeouts' lateness, summed from the running
// dispatchers' health records; the saga page's "coming due" counts that
// saga's timeouts only. Drawn in chromium at 1,400 px (a screenshot,
// checked not blank, with the dead letters' red in it;
// JETSAGA_CHART_SCREENSHOT=FILE keeps it as FILE-recent.png).
func TestRecentHourChart(t *testing.T) {
	w := newWorkload(t)
	def := saga.Define[struct{}]("reminder")
	saga.StartedBy(def, saga.By(func(m RecentStart) string { return m.ID }),
		func(_ context.Context, c *saga.Context[struct{}], _ RecentStart) error {
			if _, err := c.RequestTimeout(500*time.Millisecond, RecentDue{}); err != nil {
				return err
			}
			_, err := c.RequestTimeout(30*time.Minute, RecentEnd{})
			return err
		})
	saga.StartedBy(def, saga.By(func(m RecentBad) string { return m.ID }),
		func(context.Context, *saga.Context[struct{}], RecentBad) error {
			return saga.Permanent(errors.New("no such customer"))
		})
	saga.OnTimeout(def, func(context.Context, *saga.Context[struct{}], RecentDue) error { return nil })
	saga.OnTimeout(def, func(context.Context, *saga.Context[struct{}], RecentEnd) error { return nil })
	d := w.dispatcher("reminders", saga.WithSagas(def))
	const good, bad = 20, 3
	for i := range good {
		if _, err := d.Send(t.Context(), RecentStart{ID: fmt.Sprint("r", i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range bad {
		if _, err := d.Send(t.Context(), RecentBad{ID: fmt.Sprint("b", i)}); err != nil {
			t.Fatal(err)
		}
	}
	const steps = good + bad + good // the starts, the failures, the timeouts due at once
	q, err := w.broker.Queue(t.Context(), "reminders")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Await(t, 60*time.Second, func() string {
		ds, err := dispatchers(t.Context(), q)
		if err != nil {
			return err.Error()
		}
		rh := recentHour(ds, "", time.Now())
		if rh.Steps != steps || rh.DeadLetters != bad || rh.Timeouts != good {
			return fmt.Sprintf("health records say %d steps, %d dead letters, %d timeouts; want %d, %d, %d", rh.Steps, rh.DeadLetters, rh.Timeouts, steps, bad, good)
		}
		return ""
	})

	srv := w.console("", false)
	b := startBrowser(t)
	b.resize(1400, 900)
	sum := func(sel, attr string) int {
		return b.evalInt(fmt.Sprintf(`Array.from(document.querySelectorAll(%q)).reduce((n, r) => n + +r.dataset.%s, 0)`, sel, attr))
	}
	for _, page := range []string{"/queues/reminders", "/sagas/reminder"} {
		b.navigate(srv.URL+page, func(href string) bool { return strings.HasPrefix(href, srv.URL+page) })
		if n := b.evalInt(`document.querySelectorAll("#recent-steps .steps-bar").length`); n != 60 {
			t.Errorf("%s: %d minutes in the last hour's chart, want 60", page, n)
		}
		if got := sum("#recent-steps .steps-bar", "steps"); got != steps {
			t.Errorf("%s: the chart's minutes hold %d steps, want %d", page, got, steps)
		}
		if got := sum("#recent-steps .dead-bar", "dead"); got != bad {
			t.Errorf("%s: the chart's minutes hold %d dead letters, want %d", page, got, bad)
		}
		if got := sum("#recent-late .late-bar", "timeouts"); got != good {
			t.Errorf("%s: the lateness chart counts %d timeouts, want %d", page, got, good)
		}
		if got := b.evalString(`document.querySelector("#recent-summary").innerText`); !strings.Contains(got, fmt.Sprintf("%d steps, %d dead-lettered, %d timeouts, their handlers' lateness p99 ≤", steps, bad, good)) {
			t.Errorf("%s: summary %q", page, got)
		}
	}
	// On the saga page, coming due: the saga's 20 later timeouts.
	if got := b.evalString(`document.querySelector("#due-summary").innerText`); !strings.Contains(got, fmt.Sprintf("%d timeouts of reminder due in the next hour", good)) {
		t.Errorf("saga page: coming due %q", got)
	}
	if got := sum("#due .due-bar", "count"); got != good {
		t.Errorf("saga page: %d timeouts in the coming-due chart, want %d", got, good)
	}
	t.Logf("the saga page's charts: coming due %d bytes, steps %d bytes, lateness %d bytes of SVG; the page %d bytes",
		b.evalInt(`document.querySelector("#due").outerHTML.length`), b.evalInt(`document.querySelector("#recent-steps").outerHTML.length`),
		b.evalInt(`document.querySelector("#recent-late").outerHTML.length`), b.evalInt(`document.documentElement.outerHTML.length`))
	b.eval(`document.querySelector("#recent-steps").scrollIntoView()`)
	shot := b.screenshot()
	checkScreenshot(t, shot, false)
	if n := colourPixels(t, shot, 0xc0, 0x39, 0x2b); n < 3 {
		t.Errorf("the screenshot shows %d pixels of the dead letters' red: not drawn", n)
	}
	if p := os.Getenv("JETSAGA_CHART_SCREENSHOT"); p != "" {
		if err := os.WriteFile(strings.TrimSuffix(p, ".png")+"-recent.png", shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Another saga's page has nothing of these.
	b.navigate(srv.URL+"/sagas/order", func(href string) bool { return strings.HasPrefix(href, srv.URL+"/sagas/order") })
	if got := sum("#recent-steps .steps-bar", "steps"); got != 0 {
		t.Errorf("saga order: %d of reminder's steps in its chart", got)
	}
}

func TestP99Bucket(t *testing.T) {
	for _, c := range []struct {
		counts []int
		want   int
	}{
		{nil, -1}, {[]int{0, 0}, -1}, {[]int{5}, 0}, {[]int{99, 1}, 0}, {[]int{98, 2}, 1}, {[]int{0, 0, 1}, 2},
		{[]int{990, 9, 1}, 0}, {[]int{989, 10, 1}, 1}, {[]int{1000, 0, 11}, 2},
	} {
		if got := p99Bucket(c.counts); got != c.want {
			t.Errorf("p99Bucket(%v) = %d, want %d", c.counts, got, c.want)
		}
	}
}
