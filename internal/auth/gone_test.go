package auth_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/auth"
	"github.com/flotilla/flotilla/internal/etcdtest"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// TestGoneAcrossDaemons: a token revoked through one daemon's Tokens is
// gone on another's as soon as its watch delivers the deletion, so the
// streams it opened there end; a token made with a ttl is refused once it
// expires.
func TestGoneAcrossDaemons(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := auth.NewTokens(cli, "/flotilla/", nil), auth.NewTokens(cli, "/flotilla/", nil)
	go a.Run(ctx)
	go b.Run(ctx)
	tok, secret, err := a.Create(ctx, "alice", auth.RoleRead, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen, err := b.Lookup(ctx, secret)
	if err != nil {
		t.Fatal(err)
	}
	gone := b.Gone(seen)
	if _, err := a.Revoke(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Error("a token revoked on another daemon is not gone here after 5 s")
	}
	select {
	case <-b.Gone(seen):
	default:
		t.Error("Gone of a token already revoked is not closed")
	}

	if _, _, err := a.Create(ctx, "x", auth.RoleRead, nil, auth.WithTTL(-time.Hour)); !errors.Is(err, auth.ErrInvalidTokenArg) {
		t.Errorf("Create with a negative ttl = %v, want ErrInvalidTokenArg", err)
	}
	short, secret, err := a.Create(ctx, "short", auth.RoleRead, nil, auth.WithTTL(time.Second))
	if err != nil || short.Expires.IsZero() {
		t.Fatalf("Create with a ttl = %+v, %v", short, err)
	}
	waitfor.Until(t, time.Until(short.Expires)+time.Second, "the token refused within a second of its expiry at "+short.Expires.String(), func() error {
		if _, err := b.Lookup(ctx, secret); !errors.Is(err, auth.ErrExpiredToken) {
			return fmt.Errorf("Lookup = %v, want ErrExpiredToken", err)
		}
		return nil
	})
}
