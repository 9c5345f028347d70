package cli

import (
	"bufio"
	"bytes"
	"context"
	"image"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/transport"
)

// env opens the command's environment on the workload's server.
func (w *workload) env() *env {
	w.t.Helper()
	var o opts
	o.defaults()
	o.conn.server, o.conn.prefix, o.conn.bucket = w.srv.ClientURL(), w.prefix, w.bucket
	e, err := connect(context.Background(), o, runConfig{logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(e.close)
	return e
}

func (w *workload) console(token string, allowActions bool) *httptest.Server {
	w.t.Helper()
	cs := newConsole(w.env(), token, allowActions, true, slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv := httptest.NewServer(cs.handler())
	w.t.Cleanup(srv.Close)
	return srv
}

func client(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t *testing.T, c *http.Client, u string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	code, _, body := do(t, c, req, header)
	return code, body
}

func post(t *testing.T, c *http.Client, u string, form url.Values, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	code, resp, body := do(t, c, req, header)
	return code, resp.Get("Location") + body
}

// do sends req with header (name, value pairs; "Host" sets req.Host) and
// returns the status, the response's header and its body.
func do(t *testing.T, c *http.Client, req *http.Request, header []string) (int, http.Header, string) {
	t.Helper()
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func TestConsoleSecurity(t *testing.T) {
	w := setUp(t)
	srv := w.console("", true)
	c := client(t)

	code, body := get(t, c, srv.URL+"/")
	if code != 200 || !strings.Contains(body, `href="/queues/orders"`) {
		t.Fatalf("overview: %d\n%s", code, body)
	}
	// Loopback: another Host (DNS rebinding) is refused.
	if code, _ := get(t, c, srv.URL+"/", "Host", "evil.example:80"); code != http.StatusForbidden {
		t.Fatalf("foreign Host: %d", code)
	}
	if !loopbackHost("localhost:1") || !loopbackHost("[::1]:2") || !loopbackHost("127.0.0.1") || loopbackHost("10.0.0.1:3") || loopbackHost("localhost.evil.example") {
		t.Fatal("loopbackHost")
	}

	code, body = get(t, c, srv.URL+"/queues/orders?state=scheduled")
	m := csrfRe.FindStringSubmatch(body)
	if code != 200 || m == nil || strings.Count(body, `class="cancel"`) != 4 {
		t.Fatalf("scheduled page: %d\n%s", code, body)
	}
	csrf := m[1]
	seq := regexp.MustCompile(`name="seq" value="(\d+)"`).FindStringSubmatch(body)[1]
	cancelURL := srv.URL + "/queues/orders/cancel"

	// Without the session cookie, with a wrong token, cross-origin: refused.
	if code, _ := post(t, client(t), cancelURL, url.Values{"csrf": {csrf}, "seq": {seq}}); code != http.StatusForbidden {
		t.Fatalf("POST without session: %d", code)
	}
	if code, _ := post(t, c, cancelURL, url.Values{"csrf": {strings.Repeat("0", 64)}, "seq": {seq}}); code != http.StatusForbidden {
		t.Fatalf("POST with a wrong CSRF token: %d", code)
	}
	if code, _ := post(t, c, cancelURL, url.Values{"seq": {seq}}); code != http.StatusForbidden {
		t.Fatalf("POST without a CSRF token: %d", code)
	}
	if code, _ := post(t, c, cancelURL, url.Values{"csrf": {csrf}, "seq": {seq}}, "Origin", "http://evil.example"); code != http.StatusForbidden {
		t.Fatalf("cross-origin POST: %d", code)
	}
	if code, _ := post(t, c, cancelURL, url.Values{"csrf": {csrf}, "seq": {seq}}, "Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden {
		t.Fatalf("cross-site POST: %d", code)
	}
	if got := jsonOf[BrowsePage](w, 0, "queues", "browse", "orders", "--state", "scheduled"); len(got.Messages) != 4 {
		t.Fatalf("a refused POST cancelled something: %+v", got)
	}
	// Same origin, the session's token: done, and the outcome is shown.
	code, loc := post(t, c, cancelURL, url.Values{"csrf": {csrf}, "seq": {seq}}, "Origin", srv.URL, "Sec-Fetch-Site", "same-origin")
	if code != http.StatusSeeOther || !strings.Contains(loc, "cancelled") {
		t.Fatalf("POST: %d %s", code, loc)
	}
	if got := jsonOf[BrowsePage](w, 0, "queues", "browse", "orders", "--state", "scheduled"); len(got.Messages) != 3 {
		t.Fatalf("after the cancel: %+v", got)
	}

	// Resubmit a dead letter (the fragile order sent without a MessageID).
	w.broken.Store(false)
	var o4 uint64
	for _, m := range jsonOf[BrowsePage](w, 0, "dlq", "list", "orders").Messages {
		if m.MessageID == "" && m.Type == "shop.OrderPlaced" {
			o4 = m.Seq
		}
	}
	code, loc = post(t, c, srv.URL+"/queues/orders/resubmit", url.Values{"csrf": {csrf}, "seq": {strconv.FormatUint(o4, 10)}})
	if code != http.StatusSeeOther || !strings.Contains(loc, "resubmitted") {
		t.Fatalf("resubmit POST: %d %s", code, loc)
	}
	testutil.AwaitTrue(t, 15*time.Second, "o4 placed", func() bool { return w.handledCount("placed/o4") == 1 })

	// A read-only console has no forms and refuses actions.
	ro := w.console("", false)
	rc := client(t)
	_, body = get(t, rc, ro.URL+"/queues/orders?state=scheduled")
	if strings.Contains(body, "<form class=\"inline\"") || strings.Contains(body, `class="cancel"`) {
		t.Fatalf("read-only console shows actions:\n%s", body)
	}
	if code, _ := post(t, rc, ro.URL+"/queues/orders/cancel", url.Values{"csrf": {csrf}, "seq": {seq}}); code != http.StatusForbidden {
		t.Fatalf("read-only POST: %d", code)
	}

	// A token: required on every request; a query token sets a cookie.
	tok := w.console("s3cret", false)
	tc := client(t)
	if code, _ := get(t, tc, tok.URL+"/"); code != http.StatusUnauthorized {
		t.Fatalf("without the token: %d", code)
	}
	if code, _ := get(t, tc, tok.URL+"/?token=wrong"); code != http.StatusUnauthorized {
		t.Fatalf("a wrong token: %d", code)
	}
	if code, _ := get(t, tc, tok.URL+"/", "Authorization", "Bearer wrong"); code != http.StatusUnauthorized {
		t.Fatalf("a wrong bearer token: %d", code)
	}
	if code, _ := get(t, tc, tok.URL+"/", "Authorization", "Bearer s3cret"); code != 200 {
		t.Fatalf("bearer token: %d", code)
	}
	if code, loc := get(t, tc, tok.URL+"/sagas/order?token=s3cret"); code != http.StatusSeeOther || strings.Contains(loc, "s3cret") {
		t.Fatalf("query token: %d %s", code, loc)
	}
	if code, body := get(t, tc, tok.URL+"/sagas/order"); code != 200 || !strings.Contains(body, ">o1<") {
		t.Fatalf("with the token cookie: %d\n%s", code, body)
	}

	// Pages for what does not exist say so.
	if code, _ := get(t, c, srv.URL+"/queues/nosuch"); code != http.StatusNotFound {
		t.Fatalf("missing queue: %d", code)
	}
	if code, _ := get(t, c, srv.URL+"/sagas/order/nope"); code != http.StatusNotFound {
		t.Fatalf("missing instance: %d", code)
	}
}

// TestConsoleCommand runs jetsaga console through Run: it binds where it
// is told, refuses a non-loopback address without a token, and stops
// with its context.
func TestConsoleCommand(t *testing.T) {
	w := newWorkload(t)
	if r := w.run("console", "--listen", "0.0.0.0:0"); r.code != ExitUsage || !strings.Contains(r.stderr, "--token") {
		t.Fatalf("non-loopback without a token: %v", r)
	}
	if r := w.run("console", "--help"); !strings.Contains(r.stdout, "127.0.0.1:8470") {
		t.Fatalf("default listen address is not loopback:\n%s", r.stdout)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"--server", w.srv.ClientURL(), "--prefix", w.prefix, "--bucket", w.bucket,
			"console", "--listen", "127.0.0.1:0"}, strings.NewReader(""), pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	m := regexp.MustCompile(`on (http://127\.0\.0\.1:\d+/) \(read-only\)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("console's first line: %q", line)
	}
	if code, body := get(t, client(t), m[1]); code != 200 || !strings.Contains(body, "jetsaga") {
		t.Fatalf("GET %s: %d\n%s", m[1], code, body)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("console exit %d", code)
	}
}

// TestConsoleBrowser renders every page in headless chromium, checks a
// screenshot, and cancels a scheduled message with the page's button.
func TestConsoleBrowser(t *testing.T) {
	w := setUp(t)
	// An activated scheduled message nobody received: it shows in the
	// lateness histogram.
	mail := w.queueHandle("mail")
	if _, err := mail.Schedule(context.Background(), &transport.Message{Body: []byte("hi")}, time.Now().Add(20*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	testutil.AwaitTrue(t, 15*time.Second, "the mail activated", func() bool {
		ms, err := mail.Peek(context.Background(), 0, 1)
		return err == nil && len(ms) == 1 && ms[0].State == transport.Active
	})
	// A topic with one subscription and one message for it.
	ctx := context.Background()
	events, err := w.broker.OpenTopic(ctx, transport.TopicConfig{Name: "events"})
	if err != nil {
		t.Fatal(err)
	}
	billing, err := events.OpenSubscription(ctx, "billing", transport.SubscriptionConfig{Filter: transport.Filter{Subjects: []string{"shop.Invoice"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.Send(ctx, &transport.Message{Subject: "shop.Invoice", MessageID: "inv-1", Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	testutil.AwaitTrue(t, 15*time.Second, "the invoice in billing", func() bool {
		c, err := billing.Counts(ctx)
		return err == nil && c.Active == 1
	})
	srv := w.console("s3cret", true)
	b := startBrowser(t)
	is := func(path string) func(string) bool {
		return func(href string) bool { return href == srv.URL+path }
	}

	b.navigate(srv.URL+"/?token=s3cret", is("/")) // the token becomes a cookie
	if got := b.evalString(`document.querySelector("#queues").innerText`); !regexp.MustCompile(`orders\s+1\s+0\s+4\s+3`).MatchString(got) {
		t.Fatalf("queues table:\n%s", got)
	}
	if got := b.evalString(`document.querySelector("#topics").innerText`); !regexp.MustCompile(`billing\s+Subject=shop.Invoice\s+1\s+1\s+0`).MatchString(got) {
		t.Fatalf("topics table:\n%s", got)
	}
	if got := b.evalString(`document.querySelector("#lateness-total").innerText`); got != "1" {
		t.Fatalf("lateness total %q", got)
	}
	if got := b.evalString(`document.querySelector("#sagas").innerText`); !strings.Contains(got, "order") {
		t.Fatalf("sagas table:\n%s", got)
	}
	shot := b.screenshot()
	checkScreenshot(t, shot, true)
	if p := os.Getenv("JETSAGA_CONSOLE_SCREENSHOT"); p != "" {
		if err := os.WriteFile(p, shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	for _, c := range []struct {
		path, selector string
		n              int
	}{
		{"/queues/orders?state=dead", "tr.msg", 3},
		{"/queues/orders?state=active", "tr.msg", 0},
		{"/queues/orders", "tr.msg", 4},
		{"/topics/events", "tr.sub", 1},
		{"/topics/events/subscriptions/billing", "tr.msg", 1},
		{"/sagas/order", "tr.inst", 3},
		{"/sagas/order/o1", "tr.timeout", 2},
		{"/timeouts?saga=order", "tr.pending", 4},
		{"/timeouts?saga=order&id=o2", "tr.pending", 2},
	} {
		b.navigate(srv.URL+c.path, is(c.path))
		if n := b.evalInt(`document.querySelectorAll("` + c.selector + `").length`); n != c.n {
			t.Errorf("%s: %d %s, want %d:\n%s", c.path, n, c.selector, c.n, b.evalString(`document.body.innerText`))
		}
	}
	if got := b.evalString(`document.querySelector("#title").innerText`); got != "pending timeouts" {
		t.Errorf("title %q", got)
	}
	b.navigate(srv.URL+"/sagas/order/o1", is("/sagas/order/o1"))
	if got := b.evalString(`document.querySelector("#data").innerText`); !strings.Contains(got, `"Order": "o1"`) {
		t.Errorf("o1's state:\n%s", got)
	}

	// The saga page's search box: by an index value (saga.Index), typed
	// in and submitted as a person would.
	b.navigate(srv.URL+"/sagas/order", is("/sagas/order"))
	find := func(index, value string) {
		t.Helper()
		b.eval(`document.querySelector("#find-index").value = ` + strconv.Quote(index) + `;
			document.querySelector("#find-value").value = ` + strconv.Quote(value) + `;
			document.querySelector("#find button").click()`)
		b.awaitPage(func(href string) bool {
			u, err := url.Parse(href)
			return err == nil && u.Query().Get("index") == index && u.Query().Get("value") == value
		})
	}
	find("shop", "main")
	if n := b.evalInt(`document.querySelectorAll("tr.inst").length`); n != 2 {
		t.Errorf("shop = main: %d instances, want 2 (o3 completed):\n%s", n, b.evalString(`document.body.innerText`))
	}
	if got := b.evalString(`document.querySelector("#found").innerText`); !strings.Contains(got, "2 live instances with shop = main") {
		t.Errorf("shop = main: %q", got)
	}
	find("order", "o1.*.>")
	if n := b.evalInt(`document.querySelectorAll("tr.inst").length`); n != 0 {
		t.Errorf("order = o1.*.> (a value, never a pattern): %d instances, want 0", n)
	}
	find("order", "o2")
	if got := b.evalString(`document.querySelector("tr.inst td").innerText`); got != "o2" {
		t.Errorf("order = o2: first row %q", got)
	}
	find("no such", "x")
	if got := b.evalString(`document.querySelector("#find-error").innerText`); !strings.Contains(got, "invalid index") {
		t.Errorf("a bad index name: %q", got)
	}

	// The allowed action: cancel the first scheduled message with its button.
	b.navigate(srv.URL+"/queues/orders?state=scheduled", is("/queues/orders?state=scheduled"))
	seq := b.evalString(`document.querySelector("tr.msg td").innerText`)
	b.eval(`document.querySelector("button.cancel").click()`)
	b.awaitPage(func(href string) bool { return strings.Contains(href, "flash=") })
	if got := b.evalString(`document.querySelector("#flash").innerText`); !strings.Contains(got, "cancelled") {
		t.Fatalf("flash after cancel: %q", got)
	}
	if n := b.evalInt(`document.querySelectorAll("tr.msg").length`); n != 3 {
		t.Fatalf("%d scheduled messages after the cancel, want 3", n)
	}
	page := jsonOf[BrowsePage](w, 0, "queues", "browse", "orders", "--state", "scheduled")
	for _, m := range page.Messages {
		if strings.TrimSpace(seq) == strconv.FormatUint(m.Seq, 10) {
			t.Fatalf("message %s still scheduled", seq)
		}
	}
}

// checkScreenshot checks that a PNG is a rendered page: it decodes, is
// 1200×900, is not blank, and shows the header's colour at the top.
// checkScreenshot fails t unless b is a PNG of at least 1200×900 that is
// not blank, with the console's header at its top if header.
func checkScreenshot(t *testing.T, b []byte, header bool) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	bounds := img.Bounds()
	if bounds.Min != (image.Point{}) || bounds.Dx() < 1200 || bounds.Dy() < 900 {
		t.Fatalf("screenshot is %v, want at least 1200x900", bounds)
	}
	colours := map[[3]uint32]int{}
	for y := 0; y < bounds.Dy(); y += 3 {
		for x := 0; x < bounds.Dx(); x += 3 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colours[[3]uint32{r >> 8, g >> 8, bl >> 8}]++
		}
	}
	if len(colours) < 20 {
		t.Fatalf("screenshot looks blank: %d colours", len(colours))
	}
	if !header {
		return
	}
	r, g, bl, _ := img.At(600, 5).RGBA()
	if r>>8 != 0x1d || g>>8 != 0x35 || bl>>8 != 0x57 {
		t.Fatalf("no header at the top of the screenshot: rgb(%d,%d,%d)", r>>8, g>>8, bl>>8)
	}
}
