package cli

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// A burst of 10,000 timeouts due within one minute, beside a few spread
// over the hour, shows on the queue page's "coming due" chart as one bar
// 10,000 high, the tallest by far, with the burst's partition key on top;
// the chart is drawn in chromium at 1,400 px (a screenshot, checked not
// blank; JETSAGA_CHART_SCREENSHOT=FILE keeps it). A span it does not know
// is a bad request.
func TestComingDueChart(t *testing.T) {
	w := newWorkload(t)
	ctx := context.Background()
	q, err := w.broker.OpenQueue(ctx, transport.QueueConfig{Name: "reminders"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	burst := now.Add(20 * time.Minute).Truncate(time.Minute).Add(10 * time.Second)
	const n = 10_000
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			var err error
			for i := g; i < n && err == nil; i += 8 {
				_, err = q.Schedule(ctx, &transport.Message{PartitionKey: "tenant-a", Body: []byte("r")}, burst.Add(time.Duration(i)*time.Millisecond))
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		if _, err := q.Schedule(ctx, &transport.Message{PartitionKey: fmt.Sprintf("tenant-%d", i), Body: []byte("q")}, now.Add(time.Duration(30+i*5)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}

	srv := w.console("", false)
	b := startBrowser(t)
	b.resize(1400, 900)
	b.navigate(srv.URL+"/queues/reminders", func(href string) bool { return strings.HasPrefix(href, srv.URL+"/queues/reminders") })
	bars := b.evalInt(`document.querySelectorAll("#due .due-bar").length`)
	if bars != 60 {
		t.Fatalf("%d bars for the next hour, want 60", bars)
	}
	counts := b.evalString(`Array.from(document.querySelectorAll("#due .due-bar")).map(r => r.dataset.count).join(",")`)
	big, others := 0, 0
	for _, c := range strings.Split(counts, ",") {
		switch c {
		case "0":
		case fmt.Sprint(n):
			big++
		default:
			others++
		}
	}
	if big != 1 || others != 5 {
		t.Errorf("bars %s: want one of %d (the burst, within one minute) and five of 1", counts, n)
	}
	tallest := b.evalInt(`Math.max(...Array.from(document.querySelectorAll("#due .due-bar")).map(r => r.getBoundingClientRect().height))`)
	small := b.evalInt(`Math.max(...Array.from(document.querySelectorAll("#due .due-bar")).filter(r => r.dataset.count === "1").map(r => Math.ceil(r.getBoundingClientRect().height)))`)
	if tallest < 100 || small > 2 {
		t.Errorf("the burst's bar is %d px high, a single message's %d px: want the burst to stand out", tallest, small)
	}
	if got := b.evalString(`document.querySelector("#burst-keys").innerText`); !strings.Contains(got, "tenant-a") || !strings.Contains(got, fmt.Sprint(n)) {
		t.Errorf("the burst's keys:\n%s", got)
	}
	if got := b.evalString(`document.querySelector("#due-summary").innerText`); !strings.Contains(got, fmt.Sprintf("%d scheduled messages due in the next hour", n+5)) {
		t.Errorf("summary: %s", got)
	}
	if width := b.evalInt(`document.querySelector("#due").getBoundingClientRect().right`); width > 1400 {
		t.Errorf("the chart ends at %d px: wider than a 1,400 px window", width)
	}
	b.eval(`document.querySelector("#due").scrollIntoView()`)
	shot := b.screenshot()
	checkScreenshot(t, shot, false)
	if n := barPixels(t, shot); n < 100 {
		t.Errorf("the screenshot shows %d pixels of the bars' colour: the chart is not drawn", n)
	}
	if p := os.Getenv("JETSAGA_CHART_SCREENSHOT"); p != "" {
		if err := os.WriteFile(p, shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The month: the burst and the rest in one day's bar.
	b.navigate(srv.URL+"/queues/reminders?span=month", func(href string) bool { return strings.HasSuffix(href, "span=month") })
	if got := b.evalInt(`Math.max(...Array.from(document.querySelectorAll("#due .due-bar")).map(r => +r.dataset.count))`); got < n {
		t.Errorf("month: the largest day holds %d, want the burst's %d at least", got, n)
	}
	if _, err := comingDue(ctx, []*transport.Queue{q}, "", "week", now); err == nil {
		t.Error("span week: no error")
	}
}

// barPixels counts the pixels of the chart's bars' colour (#457b9d) in a
// PNG.
func barPixels(t *testing.T, b []byte) int {
	t.Helper()
	return colourPixels(t, b, 0x45, 0x7b, 0x9d)
}

// colourPixels counts the pixels of colour #rrggbb in a PNG.
func colourPixels(t *testing.T, b []byte, rr, gg, bb uint32) int {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			if r, g, bl, _ := img.At(x, y).RGBA(); r>>8 == rr && g>>8 == gg && bl>>8 == bb {
				n++
			}
		}
	}
	return n
}
