package usersignup_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jetsaga/jetsaga/examples/usersignup"
	"github.com/jetsaga/jetsaga/internal/pgtest"
	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

var pg *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, &pg) }

// TestSignUpAndConfirm runs the service on an embedded nats-server and a
// private PostgreSQL server, over HTTP: ann signs up and confirms, bob
// signs up and lets the link expire, a second sign-up of ann's address is
// refused and starts nothing.
func TestSignUpAndConfirm(t *testing.T) {
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	srv := testutil.StartServer(t, embedded.Options{})
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	broker, err := transport.NewJetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	const expiry = 8 * time.Second
	svc, err := usersignup.New(ctx, pool, broker, expiry, testutil.Logger())
	if err != nil {
		t.Fatal(err)
	}
	testutil.RunUntilCleanup(t, svc.Run)
	web := httptest.NewServer(svc.Handler())
	t.Cleanup(web.Close)
	post := func(path string, form url.Values) int {
		resp, err := http.PostForm(web.URL+path, form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	mail, err := broker.Queue(ctx, usersignup.MailQueue)
	if err != nil {
		t.Fatal(err)
	}

	for _, email := range []string{"ann@example.com", "bob@example.com"} {
		if code := post("/signup", url.Values{"email": {email}}); code != http.StatusAccepted {
			t.Fatalf("sign-up of %s: %d", email, code)
		}
	}
	if code := post("/signup", url.Values{"email": {"ann@example.com"}}); code != http.StatusConflict {
		t.Fatalf("second sign-up of ann: %d, want %d", code, http.StatusConflict)
	}
	// One e-mail per committed sign-up: the refused one started nothing.
	tokens := map[string]string{}
	testutil.Await(t, 30*time.Second, func() string {
		rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		ds, _ := mail.Receive(rctx, 10)
		for _, d := range ds {
			m, err := saga.Decode[usersignup.SendConfirmation](d.Message)
			if err != nil {
				t.Fatal(err)
			}
			if _, dup := tokens[m.Email]; dup {
				t.Errorf("a second confirmation e-mail for %s", m.Email)
			}
			tokens[m.Email] = m.Token
			if err := d.Complete(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if len(tokens) < 2 {
			return fmt.Sprintf("e-mails for %v", tokens)
		}
		return ""
	})

	// A wrong token changes nothing; the right one confirms ann.
	if code := post("/confirm", url.Values{"email": {"ann@example.com"}, "token": {"forged"}}); code != http.StatusAccepted {
		t.Fatalf("confirm: %d", code)
	}
	if code := post("/confirm", url.Values{"email": {"ann@example.com"}, "token": {tokens["ann@example.com"]}}); code != http.StatusAccepted {
		t.Fatalf("confirm: %d", code)
	}
	confirmed := func(email string) (bool, error) {
		var at *time.Time
		err := pool.QueryRow(ctx, "SELECT confirmed_at FROM users WHERE email = $1", email).Scan(&at)
		return at != nil, err
	}
	testutil.AwaitTrue(t, 30*time.Second, "ann confirmed", func() bool {
		ok, _ := confirmed("ann@example.com")
		return ok
	})
	// Bob never confirms: his link expires and his row goes, freeing the
	// address; ann's stays, confirmed (her expiry was cancelled).
	testutil.AwaitTrue(t, expiry+30*time.Second, "bob's unconfirmed row deleted", func() bool {
		_, err := confirmed("bob@example.com")
		return errors.Is(err, pgx.ErrNoRows)
	})
	if ok, err := confirmed("ann@example.com"); !ok || err != nil {
		t.Fatalf("ann: confirmed %v, %v", ok, err)
	}
	if code := post("/signup", url.Values{"email": {"bob@example.com"}}); code != http.StatusAccepted {
		t.Fatalf("bob signing up again: %d", code)
	}
}
