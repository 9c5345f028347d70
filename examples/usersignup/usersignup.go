package usersignup

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/pgstore"
	"github.com/jetsaga/jetsaga/saga/pgstore/outbox"
	"github.com/jetsaga/jetsaga/transport"
)

// Schema is the service's own table.
const Schema = `CREATE TABLE IF NOT EXISTS users (
	email        text PRIMARY KEY,
	created_at   timestamptz NOT NULL DEFAULT now(),
	confirmed_at timestamptz
)`

// Queue is the dispatcher's queue; MailQueue is where the saga asks for
// confirmation e-mails.
const (
	Queue     = "usersignup"
	MailQueue = "usersignup-mail"
)

// ErrTaken is returned by SignUp for an address that has an account.
var ErrTaken = errors.New("usersignup: address taken")

// Messages.
type (
	// SignedUp starts the confirmation of a new user's address.
	SignedUp struct{ Email, Token string }
	// ConfirmEmail is the user following the link in the e-mail.
	ConfirmEmail struct{ Email, Token string }
	// SendConfirmation asks the mailer to e-mail the link.
	SendConfirmation struct{ Email, Token string }
	// expire is the saga's timeout: the link is no longer good.
	expire struct{}
)

func (SignedUp) MessageName() string         { return "usersignup.SignedUp" }
func (ConfirmEmail) MessageName() string     { return "usersignup.ConfirmEmail" }
func (SendConfirmation) MessageName() string { return "usersignup.SendConfirmation" }
func (expire) MessageName() string           { return "usersignup.Expire" }

// State is the saga's data for one address.
type State struct{ Token string }

// Saga returns the confirmation saga, named "signup", keyed by address:
// the link expires after expiry, and the unconfirmed user is deleted.
// Its handlers write to the users table in the step's transaction, so the
// dispatcher's store must be a pgstore.Store on the table's database.
func Saga(expiry time.Duration) *saga.Definition[State] {
	d := saga.Define[State]("signup")
	byEmail := func(email string) string { return email }
	saga.StartedBy(d, saga.By(func(m SignedUp) string { return byEmail(m.Email) }),
		func(ctx context.Context, c *saga.Context[State], m SignedUp) error {
			c.Data.Token = m.Token
			if _, err := c.RequestTimeout(expiry, expire{}); err != nil {
				return err
			}
			return c.Send(MailQueue, SendConfirmation(m))
		})
	saga.Handles(d, saga.By(func(m ConfirmEmail) string { return byEmail(m.Email) }),
		func(ctx context.Context, c *saga.Context[State], m ConfirmEmail) error {
			if m.Token != c.Data.Token {
				return nil // not this link: ignored
			}
			tx, ok := pgstore.Tx(ctx)
			if !ok {
				return errNoTx
			}
			// In the step's transaction: the user is confirmed if and only
			// if the saga's completion commits.
			if _, err := tx.Exec(ctx, "UPDATE users SET confirmed_at = now() WHERE email = $1", m.Email); err != nil {
				return err
			}
			c.MarkComplete() // cancels the expiry
			return nil
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[State], _ expire) error {
		tx, ok := pgstore.Tx(ctx)
		if !ok {
			return errNoTx
		}
		if _, err := tx.Exec(ctx, "DELETE FROM users WHERE email = $1 AND confirmed_at IS NULL", c.ID()); err != nil {
			return err
		}
		c.MarkComplete()
		return nil
	})
	return d
}

var errNoTx = saga.Permanent(errors.New("usersignup: no step transaction: the dispatcher's store must be a pgstore.Store"))

// Service is the sign-up service.
type Service struct {
	pool   *pgxpool.Pool
	outbox *outbox.Table
	d      *saga.Dispatcher
}

// New migrates the service's tables (users, the saga store's, the
// outbox's) and returns the service; Run runs it.
func New(ctx context.Context, pool *pgxpool.Pool, broker *transport.Broker, expiry time.Duration, logger *slog.Logger) (*Service, error) {
	if _, err := pool.Exec(ctx, Schema); err != nil {
		return nil, fmt.Errorf("usersignup: %w", err)
	}
	if err := pgstore.Migrate(ctx, pool); err != nil {
		return nil, err
	}
	if err := outbox.Migrate(ctx, pool); err != nil {
		return nil, err
	}
	store, err := pgstore.New(ctx, pool)
	if err != nil {
		return nil, err
	}
	ob, err := outbox.New(ctx, pool, broker, outbox.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	d, err := saga.NewDispatcher(broker, store, Queue, saga.WithSagas(Saga(expiry)),
		saga.WithService(ob), saga.WithService(store), saga.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	return &Service{pool: pool, outbox: ob, d: d}, d.Open(ctx)
}

// Run runs the sagas and the outbox's relay until ctx ends.
func (s *Service) Run(ctx context.Context) error { return s.d.Run(ctx) }

// SignUp inserts the user and starts the confirmation saga, in one
// transaction. It returns ErrTaken if the address has an account.
func (s *Service) SignUp(ctx context.Context, email string) error {
	token := newToken()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO users (email) VALUES ($1)", email); err != nil {
			return err
		}
		_, err := s.outbox.SendSaga(ctx, tx, s.d, SignedUp{Email: email, Token: token})
		return err
	})
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "23505" { // unique_violation
		return fmt.Errorf("%w: %s", ErrTaken, email)
	}
	return err
}

// Confirm passes on the user's confirmation to the saga.
func (s *Service) Confirm(ctx context.Context, email, token string) error {
	_, err := s.d.Send(ctx, ConfirmEmail{Email: email, Token: token})
	return err
}

// Handler serves POST /signup and POST /confirm, whose forms carry email
// (and token).
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /signup", func(w http.ResponseWriter, r *http.Request) {
		err := s.SignUp(r.Context(), r.FormValue("email"))
		switch {
		case errors.Is(err, ErrTaken):
			http.Error(w, err.Error(), http.StatusConflict)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	})
	mux.HandleFunc("POST /confirm", func(w http.ResponseWriter, r *http.Request) {
		if err := s.Confirm(r.Context(), r.FormValue("email"), r.FormValue("token")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	return mux
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
