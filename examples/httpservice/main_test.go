package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// startService runs the service's handlers, dispatcher and events consumer
// on an embedded nats-server, with codes that are always 123456.
func startService(t *testing.T, ttl time.Duration) *httptest.Server {
	t.Helper()
	// A server that does not start fails the test rather than skipping
	// it; a loaded machine running -race gets a minute to start it.
	srv, err := embedded.Start(embedded.Options{ReadyTimeout: time.Minute})
	if err != nil {
		t.Fatalf("start an embedded nats-server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	svc, err := newService(t.Context(), nc, serviceConfig{
		TTL: ttl, NewCode: func() string { return "123456" },
		Logger: slog.New(slog.NewTextHandler(tWriter{t}, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	hs := httptest.NewServer(svc.Handler())
	t.Cleanup(func() {
		hs.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return hs
}

// tWriter sends log lines to t.Log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// call makes a request and returns the status and the decoded JSON body.
func call(t *testing.T, method, url, body string, header ...string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	if resp.Header.Get("Content-Type") != "application/json" {
		return resp.StatusCode, nil // the mux's own plain-text answers (404, 405)
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil && err != io.EOF {
		t.Fatalf("%s %s: decoding the answer: %v", method, url, err)
	}
	return resp.StatusCode, v
}

// poll polls GET url until ok accepts the answer.
func poll(t *testing.T, url string, ok func(status int, v map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		status, v := call(t, "GET", url, "")
		if ok(status, v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: still %d %v", url, status, v)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func statusIs(want string) func(int, map[string]any) bool {
	return func(code int, v map[string]any) bool { return code == http.StatusOK && v["status"] == want }
}

func history(v map[string]any) string { return fmt.Sprint(v["history"]) }

func TestLoginVerified(t *testing.T) {
	hs := startService(t, time.Minute)
	url := hs.URL + "/login/l1"

	if code, _ := call(t, "GET", url, ""); code != http.StatusNotFound {
		t.Errorf("GET before any request: got %d, want 404", code)
	}
	code, v := call(t, "POST", url+"/code", `{"user":"ann"}`)
	if code != http.StatusAccepted || v["status"] != "processing" {
		t.Fatalf("POST code: got %d %v, want 202 processing", code, v)
	}
	v = poll(t, url, statusIs("pending"))
	if v["user"] != "ann" || v["attempts"] != 0.0 || v["expiresAt"] == nil {
		t.Errorf("pending login: got %v", v)
	}
	if ts, _ := v["timeouts"].([]any); len(ts) != 1 {
		t.Errorf("pending login: got timeouts %v, want the expiry", v["timeouts"])
	}
	if code, _ := call(t, "POST", url+"/code", `{"user":"ann"}`); code != http.StatusConflict {
		t.Errorf("second POST code while pending: got %d, want 409", code)
	}

	if code, _ := call(t, "POST", url+"/verify", `{"code":"000000"}`); code != http.StatusAccepted {
		t.Fatalf("POST verify: got %d, want 202", code)
	}
	poll(t, url, func(_ int, v map[string]any) bool { return v["attempts"] == 1.0 })

	if code, _ := call(t, "POST", url+"/verify", `{"code":"123456"}`); code != http.StatusAccepted {
		t.Fatalf("POST verify: got %d, want 202", code)
	}
	v = poll(t, url, statusIs("verified"))
	if got, want := history(v), "[code issued, expires "; !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "wrong code, 2 attempt(s) left verified]") {
		t.Errorf("history: got %s", got)
	}
	if code, v := call(t, "POST", url+"/verify", `{"code":"123456"}`); code != http.StatusConflict || v["status"] != "verified" {
		t.Errorf("POST verify after success: got %d %v, want 409 verified", code, v)
	}
}

func TestLoginExpiresAndResend(t *testing.T) {
	hs := startService(t, 1500*time.Millisecond)

	// bob asks for a second code; only the second code's expiry fires.
	bob := hs.URL + "/login/l2"
	call(t, "POST", bob+"/code", `{"user":"bob"}`)
	first := poll(t, bob, statusIs("pending"))
	if code, _ := call(t, "POST", bob+"/resend", ""); code != http.StatusAccepted {
		t.Fatalf("POST resend: got %d, want 202", code)
	}
	second := poll(t, bob, func(_ int, v map[string]any) bool { return strings.Count(history(v), "code issued") == 2 })
	if second["expiresAt"] == first["expiresAt"] {
		t.Errorf("resend kept the expiry %v", first["expiresAt"])
	}
	if ts, _ := second["timeouts"].([]any); len(ts) != 1 {
		t.Errorf("after resend: got timeouts %v, want one", second["timeouts"])
	}
	v := poll(t, bob, statusIs("failed"))
	if v["reason"] != "expired" || strings.Count(history(v), "failed") != 1 {
		t.Errorf("expired login: got %v", v)
	}
	if code, _ := call(t, "POST", bob+"/resend", ""); code != http.StatusConflict {
		t.Errorf("POST resend after expiry: got %d, want 409", code)
	}
}

func TestIdempotencyKey(t *testing.T) {
	hs := startService(t, time.Minute)
	url := hs.URL + "/login/l4"
	call(t, "POST", url+"/code", `{"user":"dee"}`)
	poll(t, url, statusIs("pending"))
	for i := range 2 { // a client retrying the same request
		code, v := call(t, "POST", url+"/verify", `{"code":"000000"}`, "Idempotency-Key", "k1")
		if code != http.StatusAccepted || (v["duplicate"] == true) != (i == 1) {
			t.Fatalf("POST verify #%d: got %d %v, want 202, a duplicate the second time", i+1, code, v)
		}
	}
	poll(t, url, func(_ int, v map[string]any) bool { return v["attempts"] == 1.0 })
	call(t, "POST", url+"/verify", `{"code":"123456"}`)
	v := poll(t, url, statusIs("verified"))
	if n := strings.Count(history(v), "wrong code"); n != 1 {
		t.Errorf("the retried attempt counted %d times, want once: %s", n, history(v))
	}
}

func TestBadRequests(t *testing.T) {
	hs := startService(t, time.Minute)
	for _, tc := range []struct {
		name, method, path, body string
		want                     int
	}{
		{"dot in ID", "POST", "/login/a.b/code", `{"user":"x"}`, http.StatusBadRequest},
		{"wildcard in ID", "POST", "/login/a*/code", `{"user":"x"}`, http.StatusBadRequest},
		{"space in ID", "GET", "/login/a%20b", "", http.StatusBadRequest},
		{"long ID", "GET", "/login/" + strings.Repeat("a", 65), "", http.StatusBadRequest},
		{"no user", "POST", "/login/l9/code", `{}`, http.StatusBadRequest},
		{"unknown field", "POST", "/login/l9/code", `{"user":"x","admin":true}`, http.StatusBadRequest},
		{"not JSON", "POST", "/login/l9/code", `{user`, http.StatusBadRequest},
		{"huge body", "POST", "/login/l9/code", `{"user":"` + strings.Repeat("x", 5000) + `"}`, http.StatusBadRequest},
		{"verify with no flow", "POST", "/login/l9/verify", `{"code":"1"}`, http.StatusNotFound},
		{"long idempotency key", "POST", "/login/l9/code", `{"user":"x"}`, http.StatusBadRequest},
		{"wrong method", "DELETE", "/login/l9", "", http.StatusMethodNotAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hdr []string
			if tc.name == "long idempotency key" {
				hdr = []string{"Idempotency-Key", strings.Repeat("k", 200)}
			}
			if code, v := call(t, tc.method, hs.URL+tc.path, tc.body, hdr...); code != tc.want {
				t.Errorf("got %d %v, want %d", code, v, tc.want)
			}
		})
	}
}

// TestRunShutsDownGracefully runs the whole program as main does, serves a
// login, then cancels run's context as SIGTERM would: run must stop the
// HTTP server and the dispatcher, in that order, and return nil.
func TestRunShutsDownGracefully(t *testing.T) {
	var out testutil.Buffer
	ready := make(chan string, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, &out, config{Addr: "127.0.0.1:0", TTL: time.Minute, Ready: func(a string) { ready <- a }})
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("run returned early: %v\n%s", err, out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("not ready after 30s:\n%s", out.String())
	}
	url := "http://" + addr + "/login/l1"
	if code, _ := call(t, "POST", url+"/code", `{"user":"ann"}`); code != http.StatusAccepted {
		t.Fatalf("POST code: got %d", code)
	}
	poll(t, url, func(_ int, v map[string]any) bool { return strings.Contains(history(v), "code issued") })
	if !strings.Contains(out.String(), `msg="sms: your login code" user=ann login=l1 code=`) {
		t.Errorf("the code was not sent by SMS:\n%s", out.String())
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("run did not return 30s after the cancel:\n%s", out.String())
	}
	log := out.String()
	i, j, k := strings.Index(log, "shutting down"), strings.Index(log, "HTTP server stopped; draining the dispatcher"), strings.Index(log, "msg=stopped")
	if i < 0 || j < i || k < j {
		t.Errorf("shutdown steps missing or out of order:\n%s", log)
	}
	if _, err := http.Get(url); err == nil {
		t.Errorf("the server still answers after run returned")
	}
}

// TestUsageCommandsWork runs the service as main does and runs the curl
// commands it prints (as HTTP requests), with the code it sent by "SMS":
// they must work as printed. README.md must show the same commands.
func TestUsageCommandsWork(t *testing.T) {
	var out testutil.Buffer
	ready := make(chan string, 1)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, &out, config{Addr: "127.0.0.1:0", TTL: time.Minute, NewCode: func() string { return "654321" },
			Ready: func(a string) { ready <- a }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	var base string
	select {
	case a := <-ready:
		base = "http://" + a
	case err := <-done:
		done <- err // for the deferred wait, which would block forever
		t.Fatalf("run returned early: %v\n%s", err, out.String())
	}
	printed := out.String()
	for _, want := range []string{
		"The two-factor flow over HTTP, at " + base + " (codes live 1m0s):",
		"  POST /login/{id}/code    {\"user\": \"ann\"}",
		"  POST /login/{id}/resend ",
		"  POST /login/{id}/verify  {\"code\": \"123456\"}",
		"  GET  /login/{id} ",
	} {
		if !strings.Contains(printed, want) {
			t.Errorf("the service's output lacks %q:\n%s", want, printed)
		}
	}
	var cmds [][]string
	for line := range strings.Lines(printed) {
		if cmd, ok := strings.CutPrefix(strings.TrimSpace(line), "curl "); ok {
			cmds = append(cmds, shellWords(t, cmd))
		}
	}
	if len(cmds) != 3 {
		t.Fatalf("got %d curl commands, want 3:\n%s", len(cmds), printed)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(usage("http://127.0.0.1:8080", 5*time.Minute)) {
		if strings.HasPrefix(line, "  curl ") && !strings.Contains(string(readme), strings.TrimPrefix(line, "  ")) {
			t.Errorf("README.md lacks %q", strings.TrimSpace(line))
		}
	}

	// curl -i -d BODY URL: POST the body; curl URL: GET.
	do := func(args []string) (int, map[string]any) {
		method, body, url := "GET", "", ""
		for i := 0; i < len(args); i++ {
			switch args[i] {
			case "-i":
			case "-d":
				method, body = "POST", args[i+1]
				i++
			default:
				url = args[i]
			}
		}
		return call(t, method, url, strings.ReplaceAll(body, "123456", "654321"))
	}
	if code, v := do(cmds[0]); code != http.StatusAccepted {
		t.Fatalf("%v: got %d %v, want 202", cmds[0], code, v)
	}
	poll(t, base+"/login/l1", func(_ int, v map[string]any) bool { return strings.Contains(history(v), "code issued") })
	if !strings.Contains(out.String(), `msg="sms: your login code" user=ann login=l1 code=654321`) {
		t.Errorf("no code sent by SMS:\n%s", out.String())
	}
	if code, v := do(cmds[1]); code != http.StatusAccepted {
		t.Fatalf("%v: got %d %v, want 202", cmds[1], code, v)
	}
	poll(t, base+"/login/l1", statusIs("verified"))
	if code, v := do(cmds[2]); code != http.StatusOK || v["status"] != "verified" {
		t.Errorf("%v: got %d %v, want 200 verified", cmds[2], code, v)
	}
}

// shellWords splits a command line as sh does, for the quoting the usage
// uses: words, 'single-quoted' words, and a # comment.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	for s = strings.TrimSpace(s); s != "" && s[0] != '#'; s = strings.TrimSpace(s) {
		if s[0] == '\'' {
			end := strings.IndexByte(s[1:], '\'')
			if end < 0 {
				t.Fatalf("unbalanced quote in %q", s)
			}
			words, s = append(words, s[1:end+1]), s[end+2:]
			continue
		}
		end := strings.IndexAny(s, " \t")
		if end < 0 {
			end = len(s)
		}
		words, s = append(words, s[:end]), s[end:]
	}
	return words
}
