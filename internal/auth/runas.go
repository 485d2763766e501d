package auth

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/flotilla/flotilla/internal/unit"
)

// Anyone in a token's RunAs lets its units run as any user, root included.
const Anyone = "*"

// MaxRunAs bounds the users of one token's RunAs.
const MaxRunAs = 64

// userRE matches a user name as useradd accepts it, or a numeric ID.
var userRE = regexp.MustCompile(`^([a-z_][a-z0-9_.-]{0,31}\$?|[0-9]{1,10})$`)

// ParseRunAs splits a --run-as list ("app,nobody", or "*").
func ParseRunAs(s string) []string {
	var out []string
	for u := range strings.SplitSeq(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// checkRunAs validates the RunAs of a new token of role.
func checkRunAs(role Role, runAs []string) error {
	if len(runAs) == 0 {
		return nil
	}
	if role < RoleWrite {
		return fmt.Errorf("%w: a %s token runs no units: --run-as is for write and admin tokens", ErrInvalidTokenArg, role)
	}
	if len(runAs) > MaxRunAs {
		return fmt.Errorf("%w: --run-as lists %d users, the most is %d", ErrInvalidTokenArg, len(runAs), MaxRunAs)
	}
	for _, u := range runAs {
		if u != Anyone && !userRE.MatchString(u) {
			return fmt.Errorf("%w: --run-as %q is not a user name or numeric ID (or * for any user)", ErrInvalidTokenArg, u)
		}
	}
	return nil
}

// Label names the token in messages: "name (id)", or its ID.
func (t Token) Label() string {
	if t.Name != "" {
		return t.Name + " (" + t.ID + ")"
	}
	return t.ID
}

// MayRunAsRoot reports whether the token's units may run as any user,
// root included: an admin token, or one whose RunAs has "*".
func (t Token) MayRunAsRoot() bool {
	return t.Role == RoleAdmin.String() || slices.Contains(t.RunAs, Anyone)
}

// RunAsError is the refusal of a unit the token may not submit: the API
// answers it with 403.
type RunAsError struct{ Msg string }

func (e *RunAsError) Error() string { return e.Msg }

// CheckUnit refuses a unit file the token may not submit: one that runs as
// root or gets root's powers back (unit.RootNeeds), unless the token may
// run units as root; one whose User= is not in the token's RunAs.
func (t Token) CheckUnit(f *unit.File) error {
	if f == nil || t.MayRunAsRoot() {
		return nil
	}
	if why := unit.RootNeeds(f); len(why) > 0 {
		return &RunAsError{Msg: fmt.Sprintf("unit %s: %s: token %s may not run units as root (an admin gives that with flotilla token create --run-as '*')",
			f.Name, strings.Join(why, "; "), t.Label())}
	}
	if u := f.Service.User; u != "" && !slices.Contains(t.RunAs, u) {
		may := "no user: an admin gives users with flotilla token create --run-as USER,..."
		if len(t.RunAs) > 0 {
			may = strings.Join(t.RunAs, ", ")
		}
		return &RunAsError{Msg: fmt.Sprintf("unit %s: [Service] User=%s: token %s may run units as %s", f.Name, u, t.Label(), may)}
	}
	return nil
}

type tokenKey struct{}

// NewContext returns ctx carrying the token a request was authorized with.
func NewContext(ctx context.Context, t Token) context.Context {
	return context.WithValue(ctx, tokenKey{}, t)
}

// FromContext returns the token NewContext put in ctx, if any.
func FromContext(ctx context.Context) (Token, bool) {
	t, ok := ctx.Value(tokenKey{}).(Token)
	return t, ok
}

// CheckUnits refuses the first of files the request's token (in ctx) may
// not submit; without a token (no --acl) it allows them all.
func CheckUnits(ctx context.Context, files ...*unit.File) error {
	t, ok := FromContext(ctx)
	if !ok || t.MayRunAsRoot() {
		return nil
	}
	for _, f := range files {
		if err := t.CheckUnit(f); err != nil {
			return err
		}
	}
	return nil
}

// Author names who makes request r, for the versions it makes: the name of
// the token it was authorized with (its ID when unnamed), else the client
// certificate's common name, else "". A request a follower forwarded
// carries the client's token, but the follower's certificate.
func Author(r *http.Request) string {
	if t, ok := FromContext(r.Context()); ok {
		if t.Name != "" {
			return t.Name
		}
		return t.ID
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		return r.TLS.PeerCertificates[0].Subject.CommonName
	}
	return ""
}
