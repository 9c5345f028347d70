package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/examples/twofactor"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/transport"
)

// Queue names of the service.
const (
	authQueue   = "auth"        // the dispatcher's: commands and timeouts
	eventsQueue = "auth-events" // the 2FA saga's events, which the service consumes
)

// Login statuses the API reports.
const (
	statusPending    = "pending"    // a code is out; the user may enter it
	statusVerified   = "verified"   // the user passed 2FA
	statusFailed     = "failed"     // expired or too many attempts; see reason
	statusProcessing = "processing" // a command was accepted; its result is on its way
)

// service is the web service: HTTP handlers that start and feed the 2FA
// saga, the dispatcher that runs it in the same process, and a consumer of
// the saga's events queue.
type service struct {
	d      *saga.Dispatcher
	flow   *saga.Definition[twofactor.State]
	events *transport.Queue
	log    *slog.Logger

	mu     sync.Mutex
	logins map[string]*login // what the service learned from the events, by login ID
}

// login is what the service knows of one login from the saga's events.
// It lives in memory here; a real service keeps it in its own database,
// where its other replicas see it too.
type login struct {
	User    string
	Outcome string // "" while pending, statusVerified or statusFailed
	Reason  string
	History []string // the events received, oldest first
}

// serviceConfig configures a service.
type serviceConfig struct {
	// TTL is how long a code lives. Default: 5m.
	TTL time.Duration
	// NewCode makes codes. Default: twofactor's, 6 random digits.
	NewCode func() string
	// Logger is where the service logs, the SMS stub included. Required.
	Logger *slog.Logger
}

// newService sets up the saga's store, queues and dispatcher on nc.
func newService(ctx context.Context, nc *nats.Conn, cfg serviceConfig) (*service, error) {
	broker, err := transport.NewJetStream(nc, transport.WithLogger(cfg.Logger))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	store, err := kvstore.New(ctx, js, kvstore.Config{})
	if err != nil {
		return nil, err
	}
	events, err := broker.OpenQueue(ctx, transport.QueueConfig{Name: eventsQueue})
	if err != nil {
		return nil, err
	}
	flow := twofactor.New(twofactor.Config{TTL: cfg.TTL, NewCode: cfg.NewCode, Events: eventsQueue})
	d, err := saga.NewDispatcher(broker, store, authQueue, saga.WithSagas(flow), saga.WithLogger(cfg.Logger))
	if err != nil {
		return nil, err
	}
	return &service{d: d, flow: flow, events: events, log: cfg.Logger, logins: make(map[string]*login)}, nil
}

// Run runs the dispatcher and the events consumer until ctx ends, then
// lets the steps and events in flight finish and returns.
func (s *service) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = s.d.Run(ctx) })
	wg.Go(func() { s.consume(ctx) })
	wg.Wait()
	return runErr
}

// Handler returns the service's HTTP API.
func (s *service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /login/{id}/code", s.requestCode)
	mux.HandleFunc("POST /login/{id}/resend", s.resendCode)
	mux.HandleFunc("POST /login/{id}/verify", s.verify)
	mux.HandleFunc("GET /login/{id}", s.show)
	return mux
}

// validID matches the login IDs the API accepts.
var validID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// POST /login/{id}/code {"user": "ann"}: start a 2FA flow for a login.
func (s *service) requestCode(w http.ResponseWriter, r *http.Request) {
	id, ok := loginID(w, r)
	if !ok {
		return
	}
	var body struct {
		User string `json:"user"`
	}
	if !decodeBody(w, r, &body) {
		return
	}
	if body.User == "" || len(body.User) > 128 {
		httpError(w, http.StatusBadRequest, "user: 1-128 bytes required")
		return
	}
	if s.pending(r.Context(), id) {
		httpError(w, http.StatusConflict, "a code is pending for this login; use /resend")
		return
	}
	s.mu.Lock()
	prev := s.logins[id]
	s.logins[id] = &login{User: body.User} // a new flow: forget the last one's outcome
	s.mu.Unlock()
	if !s.send(w, r, id, twofactor.CodeRequested{Login: id, User: body.User}) {
		s.mu.Lock()
		s.logins[id] = prev
		if prev == nil {
			delete(s.logins, id)
		}
		s.mu.Unlock()
	}
}

// POST /login/{id}/resend: issue a new code; the old one stops working.
func (s *service) resendCode(w http.ResponseWriter, r *http.Request) {
	id, ok := loginID(w, r)
	if !ok {
		return
	}
	if !s.pending(r.Context(), id) {
		s.notPending(w, r, id)
		return
	}
	s.send(w, r, id, twofactor.CodeResendRequested{Login: id})
}

// POST /login/{id}/verify {"code": "123456"}: the user's attempt.
func (s *service) verify(w http.ResponseWriter, r *http.Request) {
	id, ok := loginID(w, r)
	if !ok {
		return
	}
	var body struct {
		Code string `json:"code"`
	}
	if !decodeBody(w, r, &body) {
		return
	}
	if body.Code == "" || len(body.Code) > 32 {
		httpError(w, http.StatusBadRequest, "code: 1-32 bytes required")
		return
	}
	if !s.pending(r.Context(), id) {
		s.notPending(w, r, id)
		return
	}
	s.send(w, r, id, twofactor.CodeEntered{Login: id, Code: body.Code})
}

// GET /login/{id}: the login's state.
func (s *service) show(w http.ResponseWriter, r *http.Request) {
	id, ok := loginID(w, r)
	if !ok {
		return
	}
	v, err := s.view(r.Context(), id)
	switch {
	case errors.Is(err, saga.ErrNotFound):
		httpError(w, http.StatusNotFound, "no such login")
	case err != nil:
		s.log.ErrorContext(r.Context(), "loading login", "login", id, "error", err)
		httpError(w, http.StatusServiceUnavailable, "try again later")
	default:
		writeJSON(w, http.StatusOK, v)
	}
}

// send hands a command to the saga through the dispatcher's queue and
// answers 202 Accepted, or an error, reporting whether it was accepted: the saga handles it right after, and the result
// shows in GET /login/{id}. An Idempotency-Key header makes a retried
// request a no-op: the transport drops the copy within the queue's
// duplicate window (10 minutes), and the saga's inbox would not handle it
// twice anyway.
//
// The dispatcher handles up to 8 messages at once, and its queue does not
// order messages per saga instance, so two commands for one login sent at
// the same moment may be handled in either order (each all or nothing). A
// client waits for one attempt's result before making the next, as a
// user typing codes does.
func (s *service) send(w http.ResponseWriter, r *http.Request, id string, m any) bool {
	var opts []saga.SendOption
	if key := r.Header.Get("Idempotency-Key"); key != "" {
		msgID := r.URL.Path + " " + key
		if len(msgID) > 128 {
			httpError(w, http.StatusBadRequest, "Idempotency-Key too long")
			return false
		}
		opts = append(opts, saga.WithMessageID(msgID))
	}
	res, err := s.d.Send(r.Context(), m, opts...)
	switch {
	case errors.Is(err, transport.ErrInvalidMessage):
		httpError(w, http.StatusBadRequest, err.Error())
		return false
	case err != nil:
		s.log.ErrorContext(r.Context(), "sending command", "login", id, "error", err)
		httpError(w, http.StatusServiceUnavailable, "try again later")
		return false
	}
	w.Header().Set("Location", "/login/"+id)
	writeJSON(w, http.StatusAccepted, accepted{Login: id, Status: statusProcessing, Duplicate: res.Duplicate})
	return true
}

// accepted is the answer to a command.
type accepted struct {
	Login  string `json:"login"`
	Status string `json:"status"`
	// Duplicate says the same Idempotency-Key was sent before: this
	// request changed nothing.
	Duplicate bool `json:"duplicate,omitempty"`
}

// pending reports whether id has a running flow. (A command may still
// race the flow's end; the saga then drops it, and GET shows the outcome.)
func (s *service) pending(ctx context.Context, id string) bool {
	inst, err := s.d.Instance(ctx, s.flow.Name(), id)
	return err == nil && !inst.Completed
}

// notPending answers a command for a login with no running flow.
func (s *service) notPending(w http.ResponseWriter, r *http.Request, id string) {
	v, err := s.view(r.Context(), id)
	if err != nil {
		httpError(w, http.StatusNotFound, "no pending code for this login")
		return
	}
	writeJSON(w, http.StatusConflict, v)
}

// loginView is what GET /login/{id} returns.
type loginView struct {
	Login     string        `json:"login"`
	User      string        `json:"user,omitempty"`
	Status    string        `json:"status"`
	Reason    string        `json:"reason,omitempty"`
	Attempts  *int          `json:"attempts,omitempty"` // wrong codes so far, while pending
	ExpiresAt *time.Time    `json:"expiresAt,omitempty"`
	Timeouts  []timeoutView `json:"timeouts,omitempty"`
	History   []string      `json:"history,omitempty"`
}

type timeoutView struct {
	Type string    `json:"type"`
	Due  time.Time `json:"due"`
}

// view puts together what the service knows of a login: the running
// saga's state from the dispatcher (Dispatcher.Instance), or the outcome
// the saga's last event told. It returns saga.ErrNotFound if there is
// neither.
func (s *service) view(ctx context.Context, id string) (loginView, error) {
	v := loginView{Login: id}
	s.mu.Lock()
	if l, ok := s.logins[id]; ok {
		v.User, v.Status, v.Reason, v.History = l.User, l.Outcome, l.Reason, slices.Clone(l.History)
	}
	s.mu.Unlock()
	inst, err := s.d.Instance(ctx, s.flow.Name(), id)
	switch {
	case err == nil && !inst.Completed:
		var st twofactor.State
		if err := json.Unmarshal(inst.Data, &st); err != nil {
			return v, fmt.Errorf("login %s: decoding state: %w", id, err)
		}
		v.User, v.Status, v.Reason, v.Attempts = st.User, statusPending, "", &st.Attempts
		v.ExpiresAt = &st.ExpiresAt
		for _, t := range inst.Timeouts {
			v.Timeouts = append(v.Timeouts, timeoutView{Type: t.Type, Due: t.At.UTC()})
		}
		return v, nil
	case err != nil && !errors.Is(err, saga.ErrNotFound):
		return v, err
	case v.Status != "": // the outcome, from the events
		return v, nil
	case err == nil || v.User != "": // completed, or requested: the event is on its way
		v.Status = statusProcessing
		return v, nil
	}
	return v, saga.ErrNotFound
}

// consume reads the saga's events, as the service's other half: it
// delivers codes and records outcomes for GET /login/{id}.
func (s *service) consume(ctx context.Context) {
	for {
		ds, err := s.events.Receive(ctx, 16)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, transport.ErrClosed) {
				return
			}
			s.log.WarnContext(ctx, "receiving events", "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		for _, d := range ds {
			// Finish what was received even while shutting down.
			dctx := context.WithoutCancel(ctx)
			if err := s.handleEvent(dctx, d.Message); err != nil {
				s.log.ErrorContext(dctx, "bad event; dead-lettering it", "seq", d.Seq, "error", err)
				_ = d.DeadLetter(dctx, "BadEvent", err.Error())
				continue
			}
			if err := d.Complete(dctx); err != nil {
				s.log.WarnContext(dctx, "completing event", "seq", d.Seq, "error", err)
			}
		}
	}
}

// events decodes the saga's events into their Go types.
var events = func() *saga.Decoder {
	d, err := saga.NewDecoder(saga.JSON{},
		saga.TypeOf[twofactor.CodeIssued](), saga.TypeOf[twofactor.CodeRejected](),
		saga.TypeOf[twofactor.Verified](), saga.TypeOf[twofactor.Failed]())
	if err != nil {
		panic(err) // two of twofactor's events under one name
	}
	return d
}()

func (s *service) handleEvent(ctx context.Context, m *transport.Message) error {
	v, err := events.Decode(m)
	if err != nil {
		return err
	}
	var id, note string
	var update func(l *login)
	switch e := v.(type) {
	case twofactor.CodeIssued:
		// The SMS gateway would go here.
		s.log.InfoContext(ctx, "sms: your login code", "user", e.User, "login", e.Login, "code", e.Code, "expires", e.ExpiresAt)
		id, note = e.Login, "code issued, expires "+e.ExpiresAt.Format(time.RFC3339)
		update = func(l *login) { l.User, l.Outcome, l.Reason = e.User, "", "" }
	case twofactor.CodeRejected:
		id, note = e.Login, fmt.Sprintf("wrong code, %d attempt(s) left", e.Remaining)
	case twofactor.Verified:
		id, note = e.Login, "verified"
		update = func(l *login) { l.Outcome = statusVerified }
	case twofactor.Failed:
		id, note = e.Login, "failed: "+e.Reason
		update = func(l *login) { l.Outcome, l.Reason = statusFailed, e.Reason }
	}
	s.log.InfoContext(ctx, "auth event", "login", id, "seq", m.Seq, "event", note)
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.logins[id]
	if !ok { // e.g. requested before a restart of this process
		l = &login{}
		s.logins[id] = l
	}
	l.History = append(l.History, note)
	if update != nil {
		update(l)
	}
	return nil
}

func loginID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if !validID.MatchString(id) {
		httpError(w, http.StatusBadRequest, "login ID: 1-64 characters of A-Z a-z 0-9 _ -")
		return "", false
	}
	return id, true
}

func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		httpError(w, http.StatusBadRequest, "body: "+err.Error())
		return false
	}
	return true
}

func httpError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
