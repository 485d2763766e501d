// Package client is a Go client of Flotilla's HTTP API (/v1). It speaks the
// JSON shapes of package api and turns every non-2xx answer into an
// *APIError carrying the server's message and code, and a connection that
// cannot be made into an *UnreachableError.
//
// A program connects to a daemon (any machine's: it forwards to the
// leader), changes units and reads the cluster:
//
//	c, err := client.New("http://127.0.0.1:7480")
//	...
//	_, err = c.PutUnit(ctx, api.UnitChange{Name: "hello.service", File: text, DesiredState: "launched"})
//	...
//	units, err := c.Units(ctx)
//
// A change is accepted once it is written; the engine places the unit and
// its machine's agent starts it afterwards, so a caller that must know the
// unit runs polls Unit (or follows Events) until its State says so. See the
// package example, docs/api.md for the API and docs/operations.md for
// tokens and TLS (WithToken, WithTLS).
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/flotilla/flotilla/api"
)

// DefaultTimeout bounds one request when New is not given WithTimeout.
const DefaultTimeout = 10 * time.Second

// Client talks to a Flotilla endpoint, or to the first of several that
// answers. It is safe for concurrent use.
type Client struct {
	eps []*apiEndpoint
	// cur is the index in eps of the endpoint in use: the last that
	// answered.
	cur       atomic.Int32
	hc        *http.Client
	timeout   time.Duration
	userAgent string
	token     string
	etcdWarn  func(since string)
	retry     time.Duration
}

// apiEndpoint is one daemon's API.
type apiEndpoint struct {
	base *url.URL
	// socket is the unix socket of a unix:// endpoint, "" for http(s).
	socket string
	name   string // as Endpoint reports it
	hc     *http.Client
}

// Option configures a Client.
type Option func(*Client)

// WithTimeout bounds every request: for ordinary calls the whole exchange,
// for Journal the wait for the response headers (a followed journal may stay
// open indefinitely). Zero or less means no limit.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) { c.timeout = d }
}

// WithHTTPClient makes the Client send its requests through hc. Its Timeout
// should be zero: a Timeout there would also cut followed journals.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.hc = hc }
}

// WithToken sends token, an API token's secret, with every request
// ("Authorization: Bearer TOKEN"), as daemons run with --acl require.
func WithToken(token string) Option {
	return func(c *Client) { c.token = token }
}

// WithTLS sends requests through a transport that uses cfg: the CA to
// verify the daemon with and the client certificate to present.
func WithTLS(cfg *tls.Config) Option {
	return func(c *Client) {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = cfg
		c.hc = &http.Client{Transport: t}
	}
}

// WithEtcdWarning has f called with the value of the
// api.EtcdUnreachableHeader (an RFC 3339 time) of every answer that
// carries it: the leader cannot reach etcd since then, its answers come
// from its memory, and it refuses writes.
func WithEtcdWarning(f func(since string)) Option {
	return func(c *Client) { c.etcdWarn = f }
}

// noteAnswer passes on what an answer's headers say about etcd.
func (c *Client) noteAnswer(resp *http.Response) {
	if c.etcdWarn == nil {
		return
	}
	if since := resp.Header.Get(api.EtcdUnreachableHeader); since != "" {
		c.etcdWarn(since)
	}
}

// WithRetry has a request that the server refused because its cluster has
// no leader at the moment (an answer of code "unavailable": an election is
// under way, or the leader it forwarded to is gone) sent again, with a growing pause,
// until it is answered otherwise or d has passed since it was first sent,
// as etcdctl rides out an election. Only requests that are safe to repeat
// are: reads, and PUT, PATCH, DELETE and POST /v1/batch, which set a state
// rather than add to it. Zero (the default) sends each request once.
func WithRetry(d time.Duration) Option {
	return func(c *Client) { c.retry = d }
}

// Pauses between the attempts of a request (WithRetry).
const (
	retryPauseMin = 50 * time.Millisecond
	retryPauseMax = 500 * time.Millisecond
)

// retryable reports whether the request of method to u that failed with
// err is sent again under WithRetry.
func retryable(method string, u *url.URL, err error) bool {
	var e *APIError
	if !errors.As(err, &e) || e.Code != "unavailable" {
		return false
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	case http.MethodPost:
		return strings.HasSuffix(u.Path, "/v1/batch")
	}
	return false
}

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.userAgent = ua }
}

// New returns a Client of the API at endpoint: an http or https URL such as
// http://127.0.0.1:7480, where a path is a prefix of every API path, or a
// daemon's unix socket (--api-socket) as unix:///var/run/fleet.sock or
// the bare path /var/run/fleet.sock, as fleetctl's --endpoint took it.
// HOST:PORT without a scheme (127.0.0.1:7480) means http://HOST:PORT, as
// etcdctl takes its endpoints.
//
// endpoint may be a comma-separated list of these, as fleetctl's and
// etcdctl's --endpoints are: a request goes to the endpoint that answered
// last (the first at the start), and to the next ones in turn when that
// one cannot be connected to, answers that it cannot reach the leader
// (503 leader_unreachable), or, for a read, fails in any way that another
// daemon may not (no answer in time, a 502 or 503). A write that may have
// reached the leader is not sent again.
func New(endpoint string, opts ...Option) (*Client, error) {
	c := &Client{
		hc:        &http.Client{},
		timeout:   DefaultTimeout,
		userAgent: "flotilla-client",
	}
	for ep := range strings.SplitSeq(endpoint, ",") {
		if ep = strings.TrimSpace(ep); ep == "" && strings.Contains(endpoint, ",") {
			continue
		}
		base, socket, err := parseEndpoint(ep)
		if err != nil {
			return nil, err
		}
		e := &apiEndpoint{base: base, socket: socket, name: base.String()}
		if socket != "" {
			e.name = "unix://" + socket
		}
		c.eps = append(c.eps, e)
	}
	if len(c.eps) == 0 {
		return nil, fmt.Errorf("invalid endpoint %q: it names no endpoint", endpoint)
	}
	for _, o := range opts {
		o(c)
	}
	for _, e := range c.eps {
		e.hc = c.hc
		if e.socket != "" {
			hc, err := overSocket(c.hc, e.socket)
			if err != nil {
				return nil, fmt.Errorf("endpoint %s: %w", e.name, err)
			}
			e.hc = hc
		}
	}
	return c, nil
}

// overSocket returns a copy of hc whose connections all go to the unix
// socket at path.
func overSocket(hc *http.Client, path string) (*http.Client, error) {
	var t *http.Transport
	switch rt := hc.Transport.(type) {
	case nil:
		t = http.DefaultTransport.(*http.Transport).Clone()
	case *http.Transport:
		t = rt.Clone()
	default:
		return nil, fmt.Errorf("a unix socket needs an *http.Transport, the HTTP client has a %T", rt)
	}
	t.Proxy = nil
	t.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
	n := *hc
	n.Transport = t
	return &n, nil
}

// hostPort matches an endpoint written HOST:PORT, without a scheme.
var hostPort = regexp.MustCompile(`^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):[0-9]+$`)

// parseEndpoint returns the base URL of endpoint's requests and, for a
// unix socket, its path (the URL is then http://localhost: any Host is
// accepted over the socket). HOST:PORT is taken as http://HOST:PORT.
func parseEndpoint(endpoint string) (*url.URL, string, error) {
	if strings.HasPrefix(endpoint, "/") {
		endpoint = "unix://" + endpoint
	}
	if hostPort.MatchString(endpoint) {
		endpoint = "http://" + endpoint // as etcdctl takes 127.0.0.1:2379
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		// Not url.Parse's words ("first path segment in URL cannot
		// contain colon"): the forms that are wanted.
		return nil, "", fmt.Errorf("invalid endpoint %q: want a URL such as http://127.0.0.1:7480, HOST:PORT, or a unix socket as unix:///path/to/socket", endpoint)
	}
	if u.Scheme == "unix" {
		if u.Host != "" || u.Path == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return nil, "", fmt.Errorf("invalid endpoint %q: want a unix socket as unix:///path/to/socket (three slashes) or /path/to/socket", endpoint)
		}
		return &url.URL{Scheme: "http", Host: "localhost"}, u.Path, nil
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, "", fmt.Errorf("invalid endpoint %q: scheme must be http, https or unix, as in http://127.0.0.1:7480 or unix:///var/run/fleet.sock", endpoint)
	}
	if u.Host == "" {
		return nil, "", fmt.Errorf("invalid endpoint %q: no host, want a URL such as http://127.0.0.1:7480", endpoint)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, "", fmt.Errorf("invalid endpoint %q: want scheme, host and optional path only", endpoint)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = strings.TrimSuffix(u.RawPath, "/")
	return u, "", nil
}

// Endpoint returns the endpoint the Client talks to (unix:///path for a
// unix socket): of several, the one that answered last.
func (c *Client) Endpoint() string { return c.ep().name }

// ep is the endpoint in use.
func (c *Client) ep() *apiEndpoint { return c.eps[c.cur.Load()] }

// each runs try on the endpoint in use and, while it fails in a way
// another daemon may not (failover), on the next ones in turn; the
// endpoint that answered stays in use. When every endpoint failed, the
// error joins theirs.
func (c *Client) each(ctx context.Context, method string, try func(*apiEndpoint) error) error {
	n := len(c.eps)
	first := int(c.cur.Load())
	var errs []error
	for i := range n {
		idx := (first + i) % n
		err := try(c.eps[idx])
		if err == nil || n == 1 || ctx.Err() != nil || !failover(method, err) {
			c.cur.Store(int32(idx))
			return err
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// failover reports whether a request that failed with err may go to
// another endpoint: always when it was not sent (no connection could be
// made, or the daemon could not reach the leader and forwarded nothing);
// a read also when no answer came or the daemon answered 502 or 503.
func failover(method string, err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		if ae.Code == "leader_unreachable" {
			return true
		}
		read := method == http.MethodGet || method == http.MethodHead
		return read && (ae.Status == http.StatusBadGateway || ae.Status == http.StatusServiceUnavailable) && ae.Code != "etcd_unreachable"
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
		return true
	}
	return method == http.MethodGet || method == http.MethodHead
}

// Status returns who answered and who leads the cluster.
func (c *Client) Status(ctx context.Context) (*api.Status, error) {
	var s api.Status
	if err := c.call(ctx, http.MethodGet, c.url(nil, "v1", "status"), nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Units lists the units named, or all units when no name is given. Names
// the cluster does not know are left out of the answer, without error. The
// units come without their File.
func (c *Client) Units(ctx context.Context, names ...string) (*api.UnitList, error) {
	q := url.Values{}
	for _, n := range names {
		q.Add("name", n)
	}
	var l api.UnitList
	if err := c.call(ctx, http.MethodGet, c.url(q, "v1", "units"), nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Unit returns one unit with its File. A unit that does not exist gives an
// *APIError for which IsNotFound is true.
func (c *Client) Unit(ctx context.Context, name string) (*api.Unit, error) {
	var u api.Unit
	if err := c.call(ctx, http.MethodGet, c.url(nil, "v1", "units", name), nil, &u); err != nil {
		return nil, err
	}
	return &u, nil
}

// PutUnit creates the unit ch.Name, changes its desired state, or both.
func (c *Client) PutUnit(ctx context.Context, ch api.UnitChange) (*api.Unit, error) {
	var u api.Unit
	if err := c.call(ctx, http.MethodPut, c.url(nil, "v1", "units", ch.Name), ch, &u); err != nil {
		return nil, err
	}
	return &u, nil
}

// DestroyUnit removes a unit from the cluster; its machine stops and unloads it.
func (c *Client) DestroyUnit(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodDelete, c.url(nil, "v1", "units", name), nil, nil)
}

// Batch applies b at once: the server validates every change before writing
// any, so on error nothing was changed.
func (c *Client) Batch(ctx context.Context, b api.Batch) (*api.BatchResult, error) {
	var r api.BatchResult
	if err := c.call(ctx, http.MethodPost, c.url(nil, "v1", "batch"), b, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// ReplaceBatch is Batch with ?replace=true: a unit whose File differs from
// the one the cluster has is replaced in place (it keeps its machine, which
// stops it, loads the new file and starts it again if it is launched)
// instead of being refused with a conflict. docs/api.md says more.
func (c *Client) ReplaceBatch(ctx context.Context, b api.Batch) (*api.BatchResult, error) {
	var r api.BatchResult
	if err := c.call(ctx, http.MethodPost, c.url(url.Values{"replace": {"true"}}, "v1", "batch"), b, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// StateFilter selects part of the cluster state (GET /v1/state); zero
// fields do not filter.
type StateFilter struct {
	Unit    string // a glob on unit names, or a range of instances (web@{1..1000}.service)
	Machine string // units scheduled to this machine
	State   string // an active state (active, failed...), a desired state, or "unplaced"
	After   string // units after this name (the Next of the former page)
	Limit   int    // at most this many units (0: all); Total counts them all
}

// State returns the cluster state: every machine, and the units f selects
// with their total.
func (c *Client) State(ctx context.Context, f StateFilter) (*api.State, error) {
	q := url.Values{}
	for k, v := range map[string]string{"unit": f.Unit, "machine": f.Machine, "state": f.State, "after": f.After} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	var s api.State
	if err := c.call(ctx, http.MethodGet, c.url(q, "v1", "state"), nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// UnitStateFilter narrows UnitStates; zero fields do not filter.
type UnitStateFilter struct {
	Machine string   // only the states this machine reports
	Names   []string // only the states of these units
}

// UnitStates returns what the agents report about their units.
func (c *Client) UnitStates(ctx context.Context, f UnitStateFilter) (*api.UnitStateList, error) {
	q := url.Values{}
	if f.Machine != "" {
		q.Set("machine", f.Machine)
	}
	for _, n := range f.Names {
		q.Add("name", n)
	}
	var l api.UnitStateList
	if err := c.call(ctx, http.MethodGet, c.url(q, "v1", "unit-states"), nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Machines lists the machines of the cluster.
func (c *Client) Machines(ctx context.Context) (*api.MachineList, error) {
	var l api.MachineList
	if err := c.call(ctx, http.MethodGet, c.url(nil, "v1", "machines"), nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// PatchMachine changes the metadata of machine id: each key of p.Metadata
// is set to its value, or removed when the value is nil. The change is
// durable and overrides what the machine's daemon reports; units that no
// longer fit the machine move. It returns the machine as changed. An
// unknown machine gives an *APIError for which IsNotFound is true.
func (c *Client) PatchMachine(ctx context.Context, id string, p api.MachinePatch) (api.Machine, error) {
	var m api.Machine
	if err := c.call(ctx, http.MethodPatch, c.url(nil, "v1", "machines", id), p, &m); err != nil {
		return api.Machine{}, err
	}
	return m, nil
}

// JournalOptions selects what Journal returns.
type JournalOptions struct {
	// Lines is how many of the last lines to send; 0 sends none, so that
	// with Follow only new lines come.
	Lines int
	// Follow keeps the stream open and sends new lines as they are written.
	Follow bool
}

// Journal returns the log of a unit as a stream of text lines. The caller
// must close it; with Follow it ends when ctx is done or the server ends it.
func (c *Client) Journal(ctx context.Context, name string, o JournalOptions) (io.ReadCloser, error) {
	if o.Lines < 0 {
		return nil, fmt.Errorf("journal of %s: invalid line count %d", name, o.Lines)
	}
	q := url.Values{"lines": {strconv.Itoa(o.Lines)}}
	if o.Follow {
		q.Set("follow", "true")
	}
	rel := c.url(q, "v1", "units", name, "journal")
	var body io.ReadCloser
	err := c.each(ctx, http.MethodGet, func(e *apiEndpoint) (err error) {
		body, err = c.journalAt(ctx, e, e.abs(rel))
		return err
	})
	return body, err
}

// journalAt opens the journal at u of endpoint e.
func (c *Client) journalAt(ctx context.Context, e *apiEndpoint, u *url.URL) (io.ReadCloser, error) {
	// The timeout covers the wait for the headers only: a followed journal
	// stays open as long as the caller reads it.
	reqCtx, cancel := context.WithCancel(ctx)
	var timer *time.Timer
	if c.timeout > 0 {
		timer = time.AfterFunc(c.timeout, cancel)
	}
	req, err := c.newRequest(reqCtx, http.MethodGet, u, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := e.hc.Do(req)
	if timer != nil && !timer.Stop() && ctx.Err() == nil {
		// The timer fired: whatever came back is cut off.
		if err == nil {
			resp.Body.Close()
		}
		cancel()
		return nil, c.timeoutError(e, req)
	}
	if err != nil {
		cancel()
		return nil, c.requestError(ctx, e, req, err)
	}
	c.noteAnswer(resp)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer cancel()
		defer resp.Body.Close()
		return nil, c.readAPIError(e, resp)
	}
	return &streamBody{ReadCloser: resp.Body, cancel: cancel}, nil
}

type streamBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

// Close closes the body and releases the request's context.
func (b *streamBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// url returns the API path made of segs (each escaped) and query q,
// relative to an endpoint's base (apiEndpoint.abs).
func (c *Client) url(q url.Values, segs ...string) *url.URL {
	var raw, plain strings.Builder
	for _, s := range segs {
		raw.WriteString("/" + url.PathEscape(s))
		plain.WriteString("/" + s)
	}
	u := &url.URL{Path: plain.String(), RawPath: raw.String()}
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	return u
}

// abs returns the URL of the API path rel (Client.url) at e.
func (e *apiEndpoint) abs(rel *url.URL) *url.URL {
	u := *e.base
	u.Path = e.base.Path + rel.Path
	u.RawPath = e.base.EscapedPath() + rel.RawPath
	u.RawQuery = rel.RawQuery
	return &u
}

func (c *Client) newRequest(ctx context.Context, method string, u *url.URL, body any) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encode %s %s: %w", method, u.Path, err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), r)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, u.Path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// call sends a request for the API path rel (Client.url) to the endpoints
// in turn (each), and decodes a 2xx answer into out (when not nil), sending
// it again while WithRetry allows.
func (c *Client) call(ctx context.Context, method string, rel *url.URL, body, out any) error {
	first := time.Now()
	pause := retryPauseMin
	for {
		err := c.each(ctx, method, func(e *apiEndpoint) error { return c.callAt(ctx, e, method, e.abs(rel), body, out) })
		if err == nil || c.retry <= 0 || time.Since(first)+pause > c.retry || !retryable(method, rel, err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, retryPauseMax)
	}
}

// callAt sends one request to e and decodes a 2xx answer into out (when
// not nil).
func (c *Client) callAt(ctx context.Context, e *apiEndpoint, method string, u *url.URL, body, out any) error {
	reqCtx := ctx
	if c.timeout > 0 {
		var cancel context.CancelFunc
		reqCtx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	req, err := c.newRequest(reqCtx, method, u, body)
	if err != nil {
		return err
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return c.requestError(ctx, e, req, err)
	}
	defer resp.Body.Close()
	c.noteAnswer(resp)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return c.readAPIError(e, resp)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		if reqCtx.Err() != nil {
			return c.requestError(ctx, e, req, err)
		}
		return fmt.Errorf("%s %s: decode answer of %s: %w", req.Method, req.URL.Path, e.name, err)
	}
	return nil
}

// requestError explains a failure to exchange req with the server; parent is
// the caller's context, req's context may add the request timeout.
func (c *Client) requestError(parent context.Context, e *apiEndpoint, req *http.Request, err error) error {
	// *url.Error repeats method and URL; keep what went wrong.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	switch {
	case parent.Err() != nil:
		return fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, parent.Err())
	case errors.Is(req.Context().Err(), context.DeadlineExceeded):
		return c.timeoutError(e, req)
	case errors.Is(err, syscall.ECONNREFUSED), e.socket != "" && errors.Is(err, syscall.ENOENT):
		// A unix socket that does not exist: no daemon made it.
		return &UnreachableError{Endpoint: e.name, Err: err}
	}
	return fmt.Errorf("%s %s at %s: %w", req.Method, req.URL.Path, e.name, err)
}

func (c *Client) timeoutError(e *apiEndpoint, req *http.Request) error {
	return fmt.Errorf("%s %s: no answer from %s within %s: %w", req.Method, req.URL.Path, e.name, c.timeout, context.DeadlineExceeded)
}

// maxErrorBody bounds how much of a non-JSON error answer is quoted.
const maxErrorBody = 512

// readAPIError turns a non-2xx answer into an *APIError. A 404 that is not
// an API error body comes from a server that does not serve the API there
// (another service's port, a wrong path prefix): the message says so.
func (c *Client) readAPIError(ep *apiEndpoint, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &APIError{Status: resp.StatusCode}
	var ae api.Error
	if err := json.Unmarshal(body, &ae); err == nil && ae.Error != "" {
		e.Code = ae.Code
		e.Message = ae.Error
		return e
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > maxErrorBody {
		msg = msg[:maxErrorBody] + "..."
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	if resp.StatusCode == http.StatusNotFound && resp.Request != nil {
		e.Message = fmt.Sprintf("%s is not a Flotilla API: %s %s answered %s (%s); check the endpoint (a daemon's --api-addr, by default http://127.0.0.1:7480)",
			ep.name, resp.Request.Method, resp.Request.URL.Path, resp.Status, msg)
		return e
	}
	e.Message = fmt.Sprintf("server answered %s: %s", resp.Status, msg)
	return e
}
