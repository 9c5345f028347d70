package cli

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// browser drives Debian's chromium, headless, through the DevTools
// protocol on a pipe (--remote-debugging-pipe: JSON messages ending in a
// NUL byte, read from fd 3 and written to fd 4), so that the test needs
// no WebSocket client and no new dependency.
type browser struct {
	t       *testing.T
	cmd     *exec.Cmd
	w       *os.File
	mu      sync.Mutex
	nextID  int
	pending map[int]chan cdpReply
	session string
	done    chan struct{}
}

type cdpReply struct {
	ID     int             `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// chromiumPath finds chromium; a machine without it fails the test (make
// test installs it, see scripts/test): a browser test is never skipped.
func chromiumPath(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	t.Fatal("chromium not found: the console's browser test needs it: apt-get install -y chromium (make test installs it when run as root)")
	return ""
}

func startBrowser(t *testing.T) *browser {
	t.Helper()
	path := chromiumPath(t)
	inR, inW, err := os.Pipe() // we write, chromium reads (fd 3)
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe() // chromium writes (fd 4), we read
	if err != nil {
		t.Fatal(err)
	}
	// Chromium's helper processes may still write to the profile for a
	// moment after it exits: it gets a directory of its own, removed on a
	// best-effort basis.
	profile, err := os.MkdirTemp("", "jetsaga-chromium-*")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
		"--hide-scrollbars", "--user-data-dir="+profile, "--remote-debugging-pipe", "about:blank")
	cmd.ExtraFiles = []*os.File{inR, outW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	inR.Close()
	outW.Close()
	b := &browser{t: t, cmd: cmd, w: inW, pending: map[int]chan cdpReply{}, done: make(chan struct{})}
	go b.read(outR)
	t.Cleanup(func() {
		_ = b.try("", "Browser.close", map[string]any{}, nil)
		select {
		case <-b.done: // chromium closed its end of the pipe
		case <-time.After(5 * time.Second):
		}
		inW.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the process group: helpers too
		_ = cmd.Wait()
		outR.Close()
		_ = os.RemoveAll(profile)
	})
	var target struct {
		TargetID string `json:"targetId"`
	}
	b.call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var att struct {
		SessionID string `json:"sessionId"`
	}
	b.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att)
	b.session = att.SessionID
	b.call(b.session, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1200, "height": 900, "deviceScaleFactor": 1, "mobile": false}, nil)
	return b
}

func (b *browser) read(r *os.File) {
	defer close(b.done)
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		msg, err := br.ReadBytes(0)
		if err != nil {
			return
		}
		var rep cdpReply
		if json.Unmarshal(msg[:len(msg)-1], &rep) != nil || rep.ID == 0 {
			continue // an event
		}
		b.mu.Lock()
		ch := b.pending[rep.ID]
		delete(b.pending, rep.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- rep
		}
	}
}

// call sends a DevTools command and decodes its result into out.
func (b *browser) call(session, method string, params any, out any) {
	b.t.Helper()
	if err := b.try(session, method, params, out); err != nil {
		b.t.Fatal(err)
	}
}

func (b *browser) try(session, method string, params any, out any) error {
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	ch := make(chan cdpReply, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method, "params": params}
	if session != "" {
		msg["sessionId"] = session
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	if _, err := b.w.Write(append(data, 0)); err != nil {
		return fmt.Errorf("%s: writing to chromium: %w", method, err)
	}
	select {
	case rep := <-ch:
		if rep.Error != nil {
			return fmt.Errorf("%s: %s", method, rep.Error.Message)
		}
		if out != nil {
			return json.Unmarshal(rep.Result, out)
		}
		return nil
	case <-b.done:
		return fmt.Errorf("%s: chromium exited", method)
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s: no answer from chromium in 30s", method)
	}
}

// eval evaluates a JavaScript expression in the page and returns its
// value as JSON.
func (b *browser) eval(expr string) json.RawMessage {
	b.t.Helper()
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	b.call(b.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &res)
	if res.Exception != nil {
		b.t.Fatalf("evaluating %s: %s", expr, res.Exception.Text)
	}
	return res.Result.Value
}

func (b *browser) evalString(expr string) string {
	b.t.Helper()
	var s string
	if err := json.Unmarshal(b.eval(expr), &s); err != nil {
		b.t.Fatalf("%s: %v", expr, err)
	}
	return s
}

func (b *browser) evalInt(expr string) int {
	b.t.Helper()
	var n int
	if err := json.Unmarshal(b.eval(expr), &n); err != nil {
		b.t.Fatalf("%s: %v", expr, err)
	}
	return n
}

// navigate loads url and waits until the document has loaded at a URL
// for which ok holds (after redirects).
func (b *browser) navigate(url string, ok func(href string) bool) {
	b.t.Helper()
	b.call(b.session, "Page.navigate", map[string]any{"url": url}, nil)
	b.awaitPage(ok)
}

func (b *browser) awaitPage(ok func(href string) bool) {
	b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var st struct{ Ready, Href string }
		raw := b.eval(`({Ready: document.readyState, Href: location.href})`)
		if err := json.Unmarshal(raw, &st); err == nil && st.Ready == "complete" && ok(st.Href) {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("page did not load: %s", raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// screenshot returns a PNG of the viewport (1200×900).
func (b *browser) screenshot() []byte {
	b.t.Helper()
	var res struct {
		Data string `json:"data"`
	}
	b.call(b.session, "Page.captureScreenshot", map[string]any{"format": "png"}, &res)
	png, err := base64.StdEncoding.DecodeString(res.Data)
	if err != nil {
		b.t.Fatal(err)
	}
	return png
}

// resize sets the viewport's size in CSS pixels.
func (b *browser) resize(width, height int) {
	b.t.Helper()
	b.call(b.session, "Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}, nil)
}
