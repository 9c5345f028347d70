package cli

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

//go:embed console.html
var consoleHTML string

// console is the web console: server-rendered pages on html/template.
//
// Security: it serves loopback only unless given a token (and then checks
// it on every request: Authorization: Bearer, or ?token= once, which
// sets an HttpOnly cookie); on a loopback address it also refuses Host
// headers other than a loopback name (DNS rebinding). Actions are POSTs,
// only with allowActions, and need the session's CSRF token (an HMAC of
// the session cookie, SameSite=Strict) and pass
// http.CrossOriginProtection (Sec-Fetch-Site / Origin same-origin).
type console struct {
	env          *env
	token        string
	allowActions bool
	loopback     bool
	key          []byte
	tmpl         *template.Template
	log          *slog.Logger
	now          func() time.Time
}

const (
	sessionCookie = "jetsaga_session"
	tokenCookie   = "jetsaga_token"
)

func newConsole(e *env, token string, allowActions, loopback bool, log *slog.Logger) *console {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	c := &console{env: e, token: token, allowActions: allowActions, loopback: loopback, key: key, log: log, now: time.Now}
	c.tmpl = template.Must(template.New("console").Funcs(template.FuncMap{
		"time": func(t time.Time) string { return fmtTime(t) },
		"timep": func(t *time.Time) string {
			if t == nil {
				return "-"
			}
			return fmtTime(*t)
		},
		"seq":   transport.FormatSeq,
		"path":  url.PathEscape,
		"query": url.QueryEscape,
		"props": fmtProps,
		"pct": func(n, max int) int {
			if max == 0 {
				return 0
			}
			return n * 100 / max
		},
		"add": func(a, b int) int { return a + b },
		"div": func(a, b int) int { return a / max(b, 1) },
		"mod": func(a, b int) int { return a % max(b, 1) },
	}).Parse(consoleHTML))
	return c
}

func (c *console) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.page(c.overview))
	mux.HandleFunc("GET /queues/{queue}", c.page(c.queuePage))
	mux.HandleFunc("GET /topics/{topic}", c.page(c.topicPage))
	mux.HandleFunc("GET /topics/{topic}/subscriptions/{sub}", c.page(c.subscriptionPage))
	mux.HandleFunc("GET /sagas/{saga}", c.page(c.sagaPage))
	mux.HandleFunc("GET /sagas/{saga}/{id...}", c.page(c.instancePage))
	mux.HandleFunc("GET /timeouts", c.page(c.timeoutsPage))
	mux.HandleFunc("GET /stuck", c.page(c.stuckPage))
	mux.HandleFunc("GET /schedules", c.page(c.schedulesPage)) // schedules_ops.go
	mux.HandleFunc("POST /queues/{queue}/cancel", c.action(c.cancelAction))
	mux.HandleFunc("POST /queues/{queue}/resubmit", c.action(c.resubmitAction))
	mux.HandleFunc("POST /topics/{topic}/cancel", c.action(c.topicCancelAction))
	mux.HandleFunc("POST /topics/{topic}/subscriptions/{sub}/resubmit", c.action(c.subscriptionResubmitAction))
	return c.guard(mux)
}

// guard checks the Host header (on loopback) and the token, and gives
// every client a session cookie.
func (c *console) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; frame-ancestors 'none'")
		w.Header().Set("Referrer-Policy", "same-origin")
		if c.loopback && !loopbackHost(r.Host) {
			http.Error(w, "forbidden: this console answers only to a loopback host name", http.StatusForbidden)
			return
		}
		if c.token != "" {
			if q := r.URL.Query().Get("token"); q != "" && r.Method == http.MethodGet && c.tokenOK(q) {
				http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: q, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
				u := *r.URL
				v := u.Query()
				v.Del("token")
				u.RawQuery = v.Encode()
				http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
				return
			}
			if !c.authorized(r) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="jetsaga"`)
				http.Error(w, "unauthorized: give the console's token (Authorization: Bearer, or ?token=)", http.StatusUnauthorized)
				return
			}
		}
		if _, err := r.Cookie(sessionCookie); err != nil {
			b := make([]byte, 16)
			_, _ = rand.Read(b)
			ck := &http.Cookie{Name: sessionCookie, Value: hex.EncodeToString(b), Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode}
			http.SetCookie(w, ck)
			r.AddCookie(ck)
		}
		next.ServeHTTP(w, r)
	})
}

func (c *console) tokenOK(s string) bool {
	return subtle.ConstantTimeCompare([]byte(s), []byte(c.token)) == 1
}

func (c *console) authorized(r *http.Request) bool {
	if h, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && c.tokenOK(h) {
		return true
	}
	ck, err := r.Cookie(tokenCookie)
	return err == nil && c.tokenOK(ck.Value)
}

func loopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// csrfToken is the CSRF token of the request's session.
func (c *console) csrfToken(r *http.Request) string {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return ""
	}
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(ck.Value))
	return hex.EncodeToString(m.Sum(nil))
}

// view is what every page's template gets.
type view struct {
	Title, Page  string
	CSRF         string
	AllowActions bool
	Flash        string
	Error        string
	Data         any
}

func (c *console) page(f func(r *http.Request) (string, string, any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		r = r.WithContext(ctx)
		title, page, data, err := f(r)
		v := view{Title: title, Page: page, CSRF: c.csrfToken(r), AllowActions: c.allowActions, Flash: r.URL.Query().Get("flash"), Data: data}
		status := http.StatusOK
		if err != nil {
			v.Error = err.Error()
			status = http.StatusInternalServerError
			switch code := exitCode(err); code {
			case ExitNotFound:
				status = http.StatusNotFound
			case ExitUsage:
				status = http.StatusBadRequest
			}
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		if err := c.tmpl.ExecuteTemplate(w, "layout", v); err != nil {
			c.log.Error("console: rendering", "page", page, "error", err)
		}
	}
}

// action runs a POST after the checks: actions allowed, same origin,
// the session's CSRF token.
func (c *console) action(f func(r *http.Request) (redirect, flash string)) http.HandlerFunc {
	cop := http.NewCrossOriginProtection()
	return func(w http.ResponseWriter, r *http.Request) {
		if !c.allowActions {
			http.Error(w, "forbidden: actions are off (start the console with --allow-actions)", http.StatusForbidden)
			return
		}
		if err := cop.Check(r); err != nil {
			http.Error(w, "forbidden: cross-origin request", http.StatusForbidden)
			return
		}
		want := c.csrfToken(r)
		if want == "" || subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(want)) != 1 {
			http.Error(w, "forbidden: missing or wrong CSRF token (reload the page)", http.StatusForbidden)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		to, flash := f(r.WithContext(ctx))
		c.log.Info("console: action", "path", r.URL.Path, "outcome", flash)
		u, _ := url.Parse(to)
		q := u.Query()
		q.Set("flash", flash)
		u.RawQuery = q.Encode()
		http.Redirect(w, r, u.String(), http.StatusSeeOther)
	}
}

// LatenessBucket is one bar of the lateness histogram.
type LatenessBucket struct {
	Label string `json:"label"`
	Upper time.Duration
	Count int `json:"count"`
}

// Lateness is the console's lateness histogram: how late timeouts and
// other scheduled messages are, as far as the queues still show it (see
// lateness).
type Lateness struct {
	Buckets []LatenessBucket
	Max     int
	Total   int
	Overdue int // scheduled, past due, not activated yet
}

var latenessBounds = []struct {
	label string
	upper time.Duration
}{
	{"≤ 50ms", 50 * time.Millisecond}, {"≤ 250ms", 250 * time.Millisecond}, {"≤ 500ms", 500 * time.Millisecond},
	{"≤ 1s", time.Second}, {"≤ 5s", 5 * time.Second}, {"≤ 1m", time.Minute}, {"> 1m", 1<<63 - 1},
}

// lateness computes the histogram by browsing the queues: an activated
// scheduled message still in a queue is EnqueuedAt − due late (due: the
// timeout's PropertyDue, else ScheduledAt); a scheduled message past its
// due time is now − due late and counts as overdue. Timeouts already
// received and completed are gone from the queues: for the full history
// use saga/sagaotel's jetsaga.timeout.lateness histogram.
func (c *console) lateness(ctx context.Context, queues []QueueInfo) (Lateness, error) {
	l := Lateness{}
	for _, b := range latenessBounds {
		l.Buckets = append(l.Buckets, LatenessBucket{Label: b.label, Upper: b.upper})
	}
	now := c.now()
	add := func(d time.Duration) {
		for i := range l.Buckets {
			if d <= l.Buckets[i].Upper {
				l.Buckets[i].Count++
				l.Max = max(l.Max, l.Buckets[i].Count)
				l.Total++
				return
			}
		}
	}
	for _, qi := range queues {
		q, err := c.env.broker.Queue(ctx, qi.Name)
		if err != nil {
			return l, err
		}
		for m, err := range q.Browse(ctx, 0) {
			if err != nil {
				return l, err
			}
			if m.ScheduledAt.IsZero() {
				continue
			}
			due := m.ScheduledAt
			if t, err := time.Parse(time.RFC3339Nano, m.Properties[timeout.PropertyDue]); err == nil {
				due = t
			}
			switch {
			case m.State == transport.Active:
				add(max(m.EnqueuedAt.Sub(due), 0))
			case now.After(due):
				add(now.Sub(due))
				l.Overdue++
			}
		}
	}
	return l, nil
}

func (c *console) overview(r *http.Request) (string, string, any, error) {
	ctx := r.Context()
	qs, err := c.env.listQueues(ctx)
	if err != nil {
		return "jetsaga", "overview", nil, err
	}
	types, err := c.env.sagaTypes(ctx)
	if errors.Is(err, ErrNotFound) {
		types, err = nil, nil
	}
	if err != nil {
		return "jetsaga", "overview", nil, err
	}
	ts, err := c.env.listTopics(ctx)
	if err != nil {
		return "jetsaga", "overview", nil, err
	}
	disp, err := c.dispatcherSummaries(ctx, qs)
	if err != nil {
		return "jetsaga", "overview", nil, err
	}
	late, err := c.lateness(ctx, qs)
	return "jetsaga", "overview", struct {
		Queues      []QueueInfo
		Topics      []TopicInfo
		Sagas       []SagaType
		Lateness    Lateness
		Prefix      string
		Store       string
		Dispatchers map[string]string
	}{qs, ts, types, late, c.env.prefix, c.env.storeName(), disp}, err
}

// dispatcherSummaries says, per queue, what its dispatchers report of
// themselves (saga.HealthRecord): how many run, and the longest wait for
// an unavailable dependency, if any — "orders: waiting for a dependency
// since ..., 41 attempts".
func (c *console) dispatcherSummaries(ctx context.Context, qs []QueueInfo) (map[string]string, error) {
	out := map[string]string{}
	for _, qi := range qs {
		q, err := c.env.broker.Queue(ctx, qi.Name)
		if err != nil {
			return nil, err
		}
		ds, err := dispatchers(ctx, q)
		if err != nil {
			return nil, err
		}
		switch {
		case len(ds) == 0:
			out[qi.Name] = "none"
		case ds[0].Waiting:
			out[qi.Name] = fmt.Sprintf("%d running; %s", len(ds), healthLine(ds[0]))
		default:
			out[qi.Name] = fmt.Sprintf("%d running", len(ds))
		}
	}
	return out, nil
}

// messagesPage is the data of the messages page of a queue, a topic or a
// subscription.
type messagesPage struct {
	Base     string // the page's URL path
	Tabs     []tab
	State    string
	Messages []MessageView
	Next     uint64
	// CanCancel: scheduled messages can be cancelled (queue, topic);
	// ResubmitTo names where dead letters are resubmitted ("" if not).
	CanCancel  bool
	ResubmitTo string
	// Subscriptions are a topic's.
	Subscriptions []SubscriptionInfo
	// Keys is a queue's waiting work by PartitionKey (its "all" tab),
	// as jetsaga queues show counts it.
	Keys *QueueShow
	// Due is a queue's scheduled messages by due time (its "all" tab).
	Due *ComingDue
	// Recent is a queue's last hour of steps (its "all" tab).
	Recent *RecentHour
}

// consoleKeyRead bounds the messages the queue page reads to count the
// work waiting per key.
const consoleKeyRead = 10000

type tab struct{ State, Label string }

var (
	tabAll    = tab{"all", "all"}
	tabActive = tab{"active", "active"}
	tabSched  = tab{"scheduled", "scheduled"}
	tabDead   = tab{"dead", "dead-lettered"}
)

// messages fills p with the page of b (or dlq, on the dead tab) that
// the request's state and from select.
func (c *console) messages(r *http.Request, p *messagesPage, b browsable, name string, dlq func() *transport.Queue) error {
	p.State = r.URL.Query().Get("state")
	if p.State == "" {
		p.State = "all"
	}
	from := uint64(0)
	if s := r.URL.Query().Get("from"); s != "" {
		var err error
		if from, err = parseSeq(s); err != nil {
			return err
		}
	}
	if !slices.ContainsFunc(p.Tabs, func(t tab) bool { return t.State == p.State }) {
		return fmt.Errorf("%w: state %q", ErrUsage, p.State)
	}
	f := browseFilter{}
	dead := false
	switch p.State {
	case "active", "scheduled":
		f.state = p.State
	case "dead":
		d := dlq()
		dead, b, name = true, d, d.Name()
	}
	var err error
	p.Messages, p.Next, err = browse(r.Context(), b, name, from, 100, f, dead, false)
	return err
}

func (c *console) queuePage(r *http.Request) (string, string, any, error) {
	name := r.PathValue("queue")
	title := "queue " + name
	q, err := c.env.queue(r.Context(), name)
	if err != nil {
		return title, "messages", nil, err
	}
	p := &messagesPage{Base: "/queues/" + url.PathEscape(name), Tabs: []tab{tabAll, tabActive, tabSched, tabDead},
		CanCancel: true, ResubmitTo: name}
	if err = c.messages(r, p, q, name, q.DeadLetterQueue); err != nil || p.State != "all" {
		return title, "messages", p, err
	}
	keys, err := showQueue(r.Context(), q, 0, consoleKeyRead)
	p.Keys = &keys
	if err != nil {
		return title, "messages", p, err
	}
	due, err := comingDue(r.Context(), []*transport.Queue{q}, "", cmp.Or(r.URL.Query().Get("span"), "hour"), c.now())
	due.Base = p.Base
	p.Due = &due
	if err != nil {
		return title, "messages", p, err
	}
	ds, err := dispatchers(r.Context(), q)
	rh := recentHour(ds, "", c.now())
	p.Recent = &rh
	return title, "messages", p, err
}

func (c *console) topicPage(r *http.Request) (string, string, any, error) {
	name := r.PathValue("topic")
	title := "topic " + name
	t, err := c.env.topic(r.Context(), name)
	if err != nil {
		return title, "messages", nil, err
	}
	ti, err := topicInfo(r.Context(), t)
	if err != nil {
		return title, "messages", nil, err
	}
	p := &messagesPage{Base: "/topics/" + url.PathEscape(name), Tabs: []tab{tabAll, tabActive, tabSched},
		CanCancel: true, Subscriptions: ti.Subscriptions}
	err = c.messages(r, p, t, name, nil)
	return title, "messages", p, err
}

func (c *console) subscriptionPage(r *http.Request) (string, string, any, error) {
	topic, name := r.PathValue("topic"), r.PathValue("sub")
	title := "subscription " + topic + subscriptionsSegment + name
	s, err := c.env.subscription(r.Context(), topic, name)
	if err != nil {
		return title, "messages", nil, err
	}
	p := &messagesPage{Base: "/topics/" + url.PathEscape(topic) + "/subscriptions/" + url.PathEscape(name),
		Tabs: []tab{tabAll, tabDead}}
	// A saga endpoint's dead letters go back to the endpoint's queue; a
	// plain subscription's need the CLI's dlq resubmit --to.
	p.ResubmitTo, _ = c.env.endpointQueue(r.Context(), name)
	err = c.messages(r, p, s, s.Path(), s.DeadLetterQueue)
	return title, "messages", p, err
}

func (c *console) sagaPage(r *http.Request) (string, string, any, error) {
	name := r.PathValue("saga")
	q := r.URL.Query()
	var (
		page InstancePage
		err  error
		find sagaFind
	)
	if find.Index, find.Value = q.Get("index"), q.Get("value"); find.Index != "" || find.Value != "" {
		// The search box: the instances an index value finds (saga.Lookup).
		find.On = true
		var fp FoundPage
		fp, err = c.env.find(r.Context(), name, find.Index, find.Value, q.Get("after"), 50)
		find.Building = fp.Building
		if errors.Is(err, ErrUsage) {
			find.Error, err = strings.TrimPrefix(err.Error(), ErrUsage.Error()+": "), nil
		}
		page = InstancePage{Saga: name, Total: len(fp.Instances), Instances: fp.Instances, Next: fp.Next}
	} else {
		page, err = c.env.instances(r.Context(), name, q.Get("after"), 50)
	}
	if err != nil {
		return "saga " + name, "saga", nil, err
	}
	d, ce, err := c.diagramOf(r.Context(), name)
	if err != nil {
		d = sagaDiagram{Note: "No diagram: " + err.Error()}
	}
	rows := make([]instanceRow, len(page.Instances))
	for i, v := range page.Instances {
		rows[i] = instanceRow{InstanceView: v, State: "running"}
		if v.Completed {
			rows[i].State = "completed"
		}
		// A machine's row says its state, as the diagram counts it.
		if ce.Kind == "machine" {
			if st, _ := recordState(ce.Kind, ce.Graph, v.Completed, v.Data); st != "" {
				rows[i].State = st
			}
		}
	}
	var due *ComingDue
	var recent *RecentHour
	if !find.On {
		due, recent, err = c.sagaTime(r, name)
	}
	return "saga " + name, "saga", struct {
		InstancePage
		Rows    []instanceRow
		Diagram sagaDiagram
		Find    sagaFind
		Due     *ComingDue
		Recent  *RecentHour
	}{page, rows, d, find, due, recent}, err
}

// sagaTime is the saga page's pictures: name's timeouts coming due on
// every queue, and the last hour of its steps on every queue's running
// dispatchers.
func (c *console) sagaTime(r *http.Request, name string) (*ComingDue, *RecentHour, error) {
	ctx := r.Context()
	infos, err := c.env.listQueues(ctx)
	if err != nil {
		return nil, nil, err
	}
	var qs []*transport.Queue
	var records []saga.HealthRecord
	for _, qi := range infos {
		q, err := c.env.broker.Queue(ctx, qi.Name)
		if err != nil {
			return nil, nil, err
		}
		ds, err := dispatchers(ctx, q)
		if err != nil {
			return nil, nil, err
		}
		qs, records = append(qs, q), append(records, ds...)
	}
	due, err := comingDue(ctx, qs, name, cmp.Or(r.URL.Query().Get("span"), "hour"), c.now())
	due.Base = "/sagas/" + url.PathEscape(name)
	rh := recentHour(records, name, c.now())
	return &due, &rh, err
}

// sagaFind is the saga page's search by an index value (saga.Index).
type sagaFind struct {
	On           bool // a search was asked for
	Index, Value string
	Error        string // a bad index name or value, shown on the page
	Building     bool   // the index is being rebuilt
}

// instanceRow is a row of the saga page's table: an instance and the
// state to show, a machine's current state (its final state for a
// completed one), else running or completed.
type instanceRow struct {
	InstanceView
	State string
}

func (c *console) instancePage(r *http.Request) (string, string, any, error) {
	name, id := r.PathValue("saga"), r.PathValue("id")
	v, err := c.env.instance(r.Context(), name, id)
	if err != nil {
		return "saga " + name + "/" + id, "instance", nil, err
	}
	d, current, err := c.instanceDiagram(r.Context(), v)
	if err != nil {
		d = sagaDiagram{Note: "No diagram: " + err.Error()}
	}
	return "saga " + name + "/" + id, "instance", struct {
		InstanceView
		DataText, ExpectsText string
		Diagram               sagaDiagram
		Current               string
	}{v, indentJSON(v.Data), v.expectsText(), d, current}, nil
}

func indentJSON(raw []byte) string {
	if len(raw) == 0 {
		return ""
	}
	var b strings.Builder
	if err := jsonIndent(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

func (c *console) timeoutsPage(r *http.Request) (string, string, any, error) {
	q := r.URL.Query()
	ps, err := c.env.pendingTimeouts(r.Context(), q.Get("queue"), q.Get("saga"), q.Get("id"))
	return "pending timeouts", "timeouts", struct {
		Saga, ID, Queue string
		Timeouts        []PendingView
	}{q.Get("saga"), q.Get("id"), q.Get("queue"), ps}, err
}

func (c *console) cancelAction(r *http.Request) (string, string) {
	name := r.PathValue("queue")
	back := "/queues/" + url.PathEscape(name) + "?state=scheduled"
	q, err := c.env.queue(r.Context(), name)
	if err != nil {
		return back, err.Error()
	}
	return back, c.cancelSeq(r, q)
}

func (c *console) topicCancelAction(r *http.Request) (string, string) {
	name := r.PathValue("topic")
	back := "/topics/" + url.PathEscape(name) + "?state=scheduled"
	t, err := c.env.topic(r.Context(), name)
	if err != nil {
		return back, err.Error()
	}
	return back, c.cancelSeq(r, t)
}

func (c *console) cancelSeq(r *http.Request, q canceller) string {
	seq, err := strconv.ParseUint(r.PostFormValue("seq"), 10, 64)
	if err != nil {
		return "bad sequence number"
	}
	o := cancelScheduled(r.Context(), q, seq)
	return fmt.Sprintf("scheduled message %s: %s", transport.FormatSeq(seq), o.Outcome)
}

func (c *console) resubmitAction(r *http.Request) (string, string) {
	name := r.PathValue("queue")
	back := "/queues/" + url.PathEscape(name) + "?state=dead"
	x, err := c.env.entity(r.Context(), name)
	if err != nil {
		return back, err.Error()
	}
	return back, c.resubmitSeq(r, x, queueDestination(x.q))
}

// subscriptionResubmitAction resubmits a dead letter of a saga endpoint's
// subscription to the endpoint's queue; the destination is never taken
// from the request.
func (c *console) subscriptionResubmitAction(r *http.Request) (string, string) {
	topic, name := r.PathValue("topic"), r.PathValue("sub")
	back := "/topics/" + url.PathEscape(topic) + "/subscriptions/" + url.PathEscape(name) + "?state=dead"
	x, err := c.env.entity(r.Context(), topic+subscriptionsSegment+name)
	if err != nil {
		return back, err.Error()
	}
	qn, ok := c.env.endpointQueue(r.Context(), name)
	if !ok {
		return back, "not a saga endpoint's subscription: resubmit with jetsaga dlq resubmit --to QUEUE"
	}
	q, err := c.env.queue(r.Context(), qn)
	if err != nil {
		return back, err.Error()
	}
	return back, c.resubmitSeq(r, x, queueDestination(q))
}

func (c *console) resubmitSeq(r *http.Request, x entity, dst destination) string {
	seq, err := strconv.ParseUint(r.PostFormValue("seq"), 10, 64)
	if err != nil {
		return "bad sequence number"
	}
	outs, err := resubmit(r.Context(), x, dst, deadFilter{seqs: []uint64{seq}}, false, 2*time.Second)
	if err != nil {
		return err.Error()
	}
	if len(outs) != 1 {
		return "nothing resubmitted"
	}
	msg := fmt.Sprintf("dead letter %d: %s", seq, outs[0].Outcome)
	if outs[0].Outcome == "resubmitted" && dst.name != x.path {
		msg += " to " + dst.name
	}
	if outs[0].Error != "" {
		msg += " (" + outs[0].Error + ")"
	}
	return msg
}

func cmdConsole(c *call) error {
	host, _, err := net.SplitHostPort(c.o.listen)
	if err != nil {
		return fmt.Errorf("%w: --listen %q: %v", ErrUsage, c.o.listen, err)
	}
	ip := net.ParseIP(host)
	loopback := host == "localhost" || ip != nil && ip.IsLoopback()
	if !loopback && c.o.token == "" {
		return fmt.Errorf("%w: --listen %s is not a loopback address: give --token", ErrUsage, c.o.listen)
	}
	ln, err := net.Listen("tcp", c.o.listen)
	if err != nil {
		return err
	}
	cs := newConsole(c.env, c.o.token, c.o.allowActions, loopback, c.rc.logger)
	srv := &http.Server{Handler: cs.handler(), ReadHeaderTimeout: 10 * time.Second}
	actions := "read-only"
	if c.o.allowActions {
		actions = "actions allowed"
	}
	fmt.Fprintf(c.stdout, "jetsaga console on http://%s/ (%s)\n", ln.Addr(), actions)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-c.env.closed:
		sctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return errClosed(c.env.nc)
	case <-c.ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	}
}

// maxCounted is how many records of a saga type the saga page reads to
// count its instances per state.
const maxCounted = 10000

// sagaDiagram is the diagram part of the saga and instance pages.
type sagaDiagram struct {
	SVG  template.HTML // saga.StateGraph.SVG: every name escaped
	Kind string
	// Note says why there is no diagram ("" if there is one).
	Note string
	// Counted records were read, of Total keys (at most maxCounted);
	// Unknown of them had no state the diagram names (data not JSON, or
	// a state the published version does not have).
	Counted, Total, Unknown int
	Capped                  bool
	Max                     int
}

// recordState is the state an instance's record is in, as graph g names
// it: the final state for a completed instance's tombstone (which keeps
// no data), else a machine's data's "machine.state" (empty: Initial), a
// plain saga's Running; "" if the record does not say (data not JSON).
// path is the machine's history (machine.WithHistory), oldest first.
func recordState(kind string, g saga.StateGraph, completed bool, data json.RawMessage) (state string, path []saga.GraphTransition) {
	switch {
	case completed:
		return g.Final, nil
	case kind != "machine":
		return saga.PlainRunning, nil
	}
	if len(data) == 0 {
		return "", nil
	}
	var d struct {
		Machine struct {
			State   string `json:"state"`
			History []struct {
				From, To, Event string
			} `json:"history"`
		} `json:"machine"`
	}
	if json.Unmarshal(data, &d) != nil {
		return "", nil
	}
	for _, t := range d.Machine.History {
		path = append(path, saga.GraphTransition{From: t.From, To: t.To, Event: t.Event})
	}
	return cmp.Or(d.Machine.State, g.Initial), path
}

// diagramOf returns the saga's diagram from its catalog entry (returned
// too; zero if there is none), with the instances per state counted from
// at most maxCounted of its records.
func (c *console) diagramOf(ctx context.Context, sagaType string) (sagaDiagram, saga.CatalogEntry, error) {
	sd := sagaDiagram{Max: maxCounted}
	ce, err := c.env.catalogEntry(ctx, sagaType, "")
	if errors.Is(err, saga.ErrNoCatalogEntry) {
		sd.Note = "No dispatcher published a diagram of this saga: a dispatcher publishes its sagas as it starts."
		return sd, ce, nil
	}
	if err != nil {
		return sd, ce, err
	}
	store, err := c.env.records(ctx)
	if err != nil {
		return sd, ce, err
	}
	counts := map[string]int{}
	known := map[string]bool{}
	for _, s := range ce.Graph.States {
		known[s] = true
	}
	for k, err := range store.ListKeys(ctx, sagaType+".") {
		if err != nil {
			return sd, ce, err
		}
		sd.Total++
		if sd.Counted >= maxCounted {
			sd.Capped = true
			continue
		}
		raw, _, err := store.Load(ctx, k)
		if errors.Is(err, saga.ErrNotFound) {
			continue // completed and expired meanwhile
		}
		if err != nil {
			return sd, ce, err
		}
		sd.Counted++
		var r storedRecord
		if json.Unmarshal(raw, &r) != nil {
			sd.Unknown++
			continue
		}
		st, _ := recordState(ce.Kind, ce.Graph, r.Completed, r.JSONData)
		if !known[st] {
			sd.Unknown++
			continue
		}
		counts[st]++
	}
	sd.Kind = ce.Kind
	sd.SVG = template.HTML(ce.Graph.SVG(sagaType, saga.DiagramHighlight{Counts: counts}))
	return sd, ce, nil
}

// instanceDiagram returns the saga's diagram with v's current state and,
// for a machine with a history, the transitions it took highlighted.
func (c *console) instanceDiagram(ctx context.Context, v InstanceView) (sagaDiagram, string, error) {
	var sd sagaDiagram
	ce, err := c.env.catalogEntry(ctx, v.Saga, "")
	if errors.Is(err, saga.ErrNoCatalogEntry) {
		sd.Note = "No dispatcher published a diagram of this saga."
		return sd, "", nil
	}
	if err != nil {
		return sd, "", err
	}
	st, path := recordState(ce.Kind, ce.Graph, v.Completed, v.Data)
	sd.Kind = ce.Kind
	sd.SVG = template.HTML(ce.Graph.SVG(v.Saga, saga.DiagramHighlight{Current: st, Path: path}))
	if ce.Kind == "machine" && len(path) == 0 {
		sd.Note = "No transitions recorded: the machine keeps them with machine.WithHistory."
	}
	return sd, st, nil
}
