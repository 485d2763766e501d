package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Errors of Tokens. They carry the package name; the API maps them to 401,
// 404 and 409.
var (
	ErrNoToken         = errors.New("auth: no API token")
	ErrUnknownToken    = errors.New("auth: unknown API token")
	ErrExpiredToken    = errors.New("auth: expired API token")
	ErrTokenNotFound   = errors.New("auth: no such token")
	ErrBootstrapped    = errors.New("auth: the ACL is already bootstrapped")
	ErrInvalidTokenArg = errors.New("auth: invalid token request")
)

// Token is an API token as stored and listed: never its secret.
type Token struct {
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	Role    string    `json:"role"`
	Created time.Time `json:"created"`
	// RunAs are the users the token's units may run as (User=): names or
	// numeric IDs, or "*" for any user, root included. An admin token may
	// run units as anyone whatever its list. A write token made before
	// run-as existed has none: the units it submitted keep running, and
	// it may submit none that runs as root, nor any other User=.
	RunAs []string `json:"runAs,omitempty"`
	// Expires is when the token stops being accepted (zero: never).
	Expires time.Time `json:"expires,omitzero"`
}

// Expired reports whether t is past its expiry at now.
func (t Token) Expired(now time.Time) bool { return !t.Expires.IsZero() && !now.Before(t.Expires) }

// MaxTokenTTL bounds a token's lifetime when one is given (ten years).
const MaxTokenTTL = 10 * 365 * 24 * time.Hour

// Tokens are the cluster's API tokens, stored in etcd under
// Prefix+"acl/tokens/<sha256 of the secret>" as JSON Token records; the
// secret itself is shown once, when the token is made, and never stored.
// Prefix+"acl/bootstrap" records that the first admin token was made.
//
// Each daemon keeps every token in memory, loaded and then kept current by
// an etcd watch (Run), so checking a request costs no etcd round trip and
// keeps working while etcd is unreachable. A secret the memory does not
// know is looked up in etcd before it is refused, so a token made through
// another daemon a moment ago is accepted at once.
type Tokens struct {
	cli    *clientv3.Client
	prefix string
	log    *slog.Logger

	mu     sync.RWMutex
	byHash map[string]Token
	loaded bool
	gone   map[string]chan struct{} // by token ID: closed when it is revoked (Gone)
	// looked holds, while follow reads every token (loading), the etcd
	// revision at which each token lookup found in etcd was last
	// written: the read may be older than the lookup, and a token made
	// since it is kept, not taken for revoked (follow).
	loading bool
	looked  map[string]int64
}

// NewTokens returns the token store of the cluster whose keys start with
// prefix (such as "/flotilla/"). Call Run to keep its memory current.
func NewTokens(cli *clientv3.Client, prefix string, log *slog.Logger) *Tokens {
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if log == nil {
		log = slog.Default()
	}
	return &Tokens{cli: cli, prefix: prefix, log: log, byHash: map[string]Token{}, gone: map[string]chan struct{}{}}
}

func (s *Tokens) tokensKey() string    { return s.prefix + "acl/tokens/" }
func (s *Tokens) bootstrapKey() string { return s.prefix + "acl/bootstrap" }

func hashSecret(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// Run loads every token and follows changes until ctx ends; after an error
// it starts again a second later.
func (s *Tokens) Run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := s.follow(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("following API tokens in etcd", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (s *Tokens) follow(ctx context.Context) error {
	s.mu.Lock()
	s.loading, s.looked = true, map[string]int64{}
	s.mu.Unlock()
	resp, err := s.cli.Get(ctx, s.tokensKey(), clientv3.WithPrefix())
	if err != nil {
		return err
	}
	m := make(map[string]Token, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var t Token
		if json.Unmarshal(kv.Value, &t) == nil {
			m[strings.TrimPrefix(string(kv.Key), s.tokensKey())] = t
		}
	}
	s.mu.Lock()
	// A token looked up meanwhile, written after this read, is no
	// revoked one: the watch, from the read's revision on, tells its
	// fate. Dropped, its Gone was closed, and the streams it had just
	// opened ended.
	for h, rev := range s.looked {
		if _, ok := m[h]; !ok && rev > resp.Header.Revision {
			if t, ok := s.byHash[h]; ok {
				m[h] = t
			}
		}
	}
	s.byHash, s.loaded = m, true
	s.loading, s.looked = false, nil
	s.closeGone()
	s.mu.Unlock()
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range s.cli.Watch(wctx, s.tokensKey(), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		s.mu.Lock()
		for _, ev := range wr.Events {
			h := strings.TrimPrefix(string(ev.Kv.Key), s.tokensKey())
			var t Token
			if ev.Type == clientv3.EventTypeDelete || json.Unmarshal(ev.Kv.Value, &t) != nil {
				delete(s.byHash, h)
				continue
			}
			s.byHash[h] = t
		}
		s.closeGone()
		s.mu.Unlock()
	}
	return ctx.Err()
}

// closeGone closes the Gone channels of the tokens no longer known.
// Callers hold mu for writing.
func (s *Tokens) closeGone() {
	if len(s.gone) == 0 {
		return
	}
	known := make(map[string]bool, len(s.byHash))
	for _, t := range s.byHash {
		known[t.ID] = true
	}
	for id, ch := range s.gone {
		if !known[id] {
			close(ch)
			delete(s.gone, id)
		}
	}
}

// Gone returns a channel closed when t is revoked (on this daemon, or on
// another as soon as the watch tells this one). The streams a token
// opened (events, journal follows) end on it, or at t.Expires.
func (s *Tokens) Gone(t Token) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.gone[t.ID]
	if !ok {
		ch = make(chan struct{})
		s.gone[t.ID] = ch
		s.closeGone() // revoked already
	}
	return ch
}

// Lookup returns the token whose secret is given: ErrNoToken for "",
// ErrUnknownToken for a secret no token has, ErrExpiredToken for one past
// its expiry.
func (s *Tokens) Lookup(ctx context.Context, secret string) (Token, error) {
	t, err := s.lookup(ctx, secret)
	if err == nil && t.Expired(time.Now()) {
		return t, fmt.Errorf("%w: token %s expired at %s", ErrExpiredToken, t.ID, t.Expires.UTC().Format(time.RFC3339))
	}
	return t, err
}

func (s *Tokens) lookup(ctx context.Context, secret string) (Token, error) {
	if secret == "" {
		return Token{}, ErrNoToken
	}
	h := hashSecret(secret)
	s.mu.RLock()
	t, ok := s.byHash[h]
	s.mu.RUnlock()
	if ok {
		return t, nil
	}
	resp, err := s.cli.Get(ctx, s.tokensKey()+h)
	if err != nil {
		return Token{}, fmt.Errorf("look the token up in etcd: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return Token{}, ErrUnknownToken
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &t); err != nil {
		return Token{}, fmt.Errorf("token record in etcd: %w", err)
	}
	s.mu.Lock()
	s.byHash[h] = t // until the watch says otherwise: Gone knows it
	if s.loading {
		s.looked[h] = resp.Kvs[0].ModRevision
	}
	s.mu.Unlock()
	return t, nil
}

// Bootstrap makes the first admin token, once for the life of the cluster:
// later calls fail with ErrBootstrapped. It returns the token and its secret.
func (s *Tokens) Bootstrap(ctx context.Context) (Token, string, error) {
	t, secret, rec, err := newToken("bootstrap", RoleAdmin, 0, Anyone)
	if err != nil {
		return Token{}, "", err
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(s.bootstrapKey()), "=", 0)).
		Then(clientv3.OpPut(s.bootstrapKey(), t.ID), clientv3.OpPut(s.tokensKey()+hashSecret(secret), rec)).
		Commit()
	if err != nil {
		return Token{}, "", fmt.Errorf("write the bootstrap token to etcd: %w", err)
	}
	if !resp.Succeeded {
		return Token{}, "", ErrBootstrapped
	}
	s.remember(secret, t)
	return t, secret, nil
}

// CreateOption is an option of Create.
type CreateOption func(*createOptions)

type createOptions struct{ ttl time.Duration }

// WithTTL makes the token expire ttl after it is made (at most
// MaxTokenTTL; 0: never).
func WithTTL(ttl time.Duration) CreateOption { return func(o *createOptions) { o.ttl = ttl } }

// Create makes a token with role, a name (for people; "" is allowed) and
// the users its units may run as (see Token.RunAs; write and admin only).
func (s *Tokens) Create(ctx context.Context, name string, role Role, runAs []string, opts ...CreateOption) (Token, string, error) {
	var o createOptions
	for _, f := range opts {
		f(&o)
	}
	if o.ttl < 0 || o.ttl > MaxTokenTTL {
		return Token{}, "", fmt.Errorf("%w: ttl %v: want a duration above 0 and at most %v (or none, for a token that does not expire)", ErrInvalidTokenArg, o.ttl, MaxTokenTTL)
	}
	if role < RoleRead || role > RoleAdmin {
		return Token{}, "", fmt.Errorf("%w: role %v: want read, write or admin", ErrInvalidTokenArg, role)
	}
	if len(name) > 128 {
		return Token{}, "", fmt.Errorf("%w: name is %d bytes, the most is 128", ErrInvalidTokenArg, len(name))
	}
	if err := checkRunAs(role, runAs); err != nil {
		return Token{}, "", err
	}
	t, secret, rec, err := newToken(name, role, o.ttl, runAs...)
	if err != nil {
		return Token{}, "", err
	}
	if _, err := s.cli.Put(ctx, s.tokensKey()+hashSecret(secret), rec); err != nil {
		return Token{}, "", fmt.Errorf("write the token to etcd: %w", err)
	}
	s.remember(secret, t)
	return t, secret, nil
}

func (s *Tokens) remember(secret string, t Token) {
	s.mu.Lock()
	s.byHash[hashSecret(secret)] = t
	s.mu.Unlock()
}

// List returns every token, oldest first, read from etcd.
func (s *Tokens) List(ctx context.Context) ([]Token, error) {
	resp, err := s.cli.Get(ctx, s.tokensKey(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read the tokens from etcd: %w", err)
	}
	out := []Token{}
	for _, kv := range resp.Kvs {
		var t Token
		if err := json.Unmarshal(kv.Value, &t); err == nil {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// Revoke deletes the token with ID id (ErrTokenNotFound if none has it).
func (s *Tokens) Revoke(ctx context.Context, id string) (Token, error) {
	resp, err := s.cli.Get(ctx, s.tokensKey(), clientv3.WithPrefix())
	if err != nil {
		return Token{}, fmt.Errorf("read the tokens from etcd: %w", err)
	}
	for _, kv := range resp.Kvs {
		var t Token
		if json.Unmarshal(kv.Value, &t) != nil || t.ID != id {
			continue
		}
		if _, err := s.cli.Delete(ctx, string(kv.Key)); err != nil {
			return Token{}, fmt.Errorf("delete the token from etcd: %w", err)
		}
		s.mu.Lock()
		delete(s.byHash, strings.TrimPrefix(string(kv.Key), s.tokensKey()))
		s.closeGone()
		s.mu.Unlock()
		return t, nil
	}
	return Token{}, fmt.Errorf("%w: %q", ErrTokenNotFound, id)
}

func newToken(name string, role Role, ttl time.Duration, runAs ...string) (t Token, secret, record string, err error) {
	var id [8]byte
	var sec [32]byte
	if _, err := rand.Read(id[:]); err != nil {
		return Token{}, "", "", err
	}
	if _, err := rand.Read(sec[:]); err != nil {
		return Token{}, "", "", err
	}
	t = Token{ID: hex.EncodeToString(id[:]), Name: name, Role: role.String(), Created: time.Now().UTC().Truncate(time.Second), RunAs: runAs}
	if ttl > 0 {
		t.Expires = t.Created.Add(ttl)
	}
	b, err := json.Marshal(t)
	if err != nil {
		return Token{}, "", "", err
	}
	return t, "flt_" + base64.RawURLEncoding.EncodeToString(sec[:]), string(b), nil
}
