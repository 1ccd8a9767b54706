// Package ziti reads and repairs the backend host identities (monky-host.<env_id>) on the OpenZiti
// controller through its edge management API (github.com/openziti/edge-api), for fleetctl.
package ziti

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-openapi/runtime"
	openapiclient "github.com/go-openapi/runtime/client"
	"github.com/go-openapi/strfmt"
	mgmt "github.com/openziti/edge-api/rest_management_api_client"
	"github.com/openziti/edge-api/rest_management_api_client/authentication"
	"github.com/openziti/edge-api/rest_management_api_client/identity"
	"github.com/openziti/edge-api/rest_model"
	"golang.org/x/sync/errgroup"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/noredirect"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// Defaults of Config.
const (
	// MaxPageSize is the largest page the controller serves; it answers 10 when asked nothing.
	MaxPageSize        = 500
	DefaultConcurrency = 8
	DefaultTimeout     = 30 * time.Second
	basePath           = "/edge/management/v1"
	// maxIdentities: a totalCount beyond it is a broken answer, not a fleet.
	maxIdentities = 1_000_000
)

// Config says how to reach and authenticate to the controller. Exactly one of Identity
// (certificate auth) or Username+Password (updb auth) is used; Identity wins when both are set.
type Config struct {
	URL string // https://host:port[/prefix]; see ParseManagementURL
	// CAPool nil means the identity's CA when there is one, else the system roots.
	CAPool      *x509.CertPool
	Username    string
	Password    secret.Value
	Identity    *ClientIdentity
	PageSize    int64         // default and cap MaxPageSize
	Concurrency int           // pages fetched at once after the first (default 8)
	Timeout     time.Duration // per request (default 30 s)
}

// Identity is what fleetctl needs of one ziti identity.
type Identity struct {
	ID             string
	Name           string
	RoleAttributes []string
	Online         *bool  // hasEdgeRouterConnection; nil when the controller did not say
	MeshStatus     string // edgeRouterConnectionStatus, "" when absent
	HasAPISession  *bool
	Hostname       string
	// SDKVersion and SDKApp are sdkInfo of the tunneller or SDK that last authenticated.
	SDKVersion, SDKApp string
	EnrollmentPending  bool // a one-time-token enrolment waits to be used
	// Cert is the identity's certificate from its cert authenticator (certs.go); nil when it has
	// none or it was not read.
	Cert *Certificate
}

// Client talks to one controller with one API session. It is safe for concurrent use.
type Client struct {
	mc      *mgmt.ZitiEdgeManagement
	session runtime.ClientAuthInfoWriter
	cfg     Config
	Method  string // "password" or "cert"
	// answered is set by the first 2xx answer to a request made with the session.
	answered *atomic.Bool
}

// Answered reports whether the controller has answered a request made with this client's session:
// a 401 on a session that never answered is a refusal (this login is not allowed to read), one on
// a session that did is a dropped session, worth one new login.
func (c *Client) Answered() bool { return c.answered.Load() }

// Dial authenticates to the controller and returns a client holding the API session.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.PageSize <= 0 || cfg.PageSize > MaxPageSize {
		cfg.PageSize = MaxPageSize
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	base, err := ParseManagementURL("controller URL", cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("ziti: %w", err)
	}
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("ziti: controller URL: %w", err)
	}
	path := u.Path + basePath

	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: cfg.CAPool}
	method := "password"
	if cfg.Identity != nil {
		method = "cert"
		tlsConf.Certificates = []tls.Certificate{cfg.Identity.Certificate}
		if tlsConf.RootCAs == nil {
			tlsConf.RootCAs = cfg.Identity.CA
		}
	} else if cfg.Username == "" || cfg.Password.Empty() {
		return nil, errors.New("ziti: no credentials: a username and password, or an identity file")
	}
	answered := new(atomic.Bool)
	hc := &http.Client{Transport: drainingTransport{answered: answered, rt: &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSClientConfig:     tlsConf,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: cfg.Concurrency + 1,
		TLSHandshakeTimeout: 10 * time.Second,
	}},
		CheckRedirect: noredirect.Refuse, // zt-session and the password would follow to any host
	}
	rt := openapiclient.NewWithClient(u.Host, path, []string{"https"}, hc)
	// go-openapi dumps the wire (password, session token) when DEBUG or SWAGGER_DEBUG is set.
	rt.SetDebug(false)
	rt.Consumers[runtime.JSONMime] = listConsumer(rt.Consumers[runtime.JSONMime])
	c := &Client{mc: mgmt.New(rt, strfmt.Default), cfg: cfg, Method: method, answered: answered}

	params := authentication.NewAuthenticateParamsWithContext(ctx).WithTimeout(cfg.Timeout).WithMethod(method)
	if method == "password" {
		params.WithAuth(&rest_model.Authenticate{
			Username: rest_model.Username(cfg.Username),
			Password: rest_model.Password(cfg.Password.Reveal()),
		})
	} else {
		params.WithAuth(&rest_model.Authenticate{})
	}
	resp, err := c.mc.Authentication.Authenticate(params)
	if err != nil {
		return nil, wrap("authenticate ("+method+")", err)
	}
	if resp.Payload == nil || resp.Payload.Data == nil || resp.Payload.Data.Token == nil || *resp.Payload.Data.Token == "" {
		return nil, errors.New("ziti: authenticate: the controller returned no session token")
	}
	c.session = openapiclient.APIKeyAuth("zt-session", "header", *resp.Payload.Data.Token)
	return c, nil
}

// ListHostIdentities returns every identity named HostPrefix*, pages after the first fetched
// concurrently; progress (optional, serialised) gets pages done and in all.
//
// Offset paging over a changing list can drop an identity, which would read as NO_IDENTITY and
// lead onboard to supersede a working box's grant. So a listing counts only when every page
// reports the first page's totalCount and that many distinct identities arrived; else it is read
// once more, then fails with ErrListChanged. A create and a delete that cancel out escape this:
// callers confirm a missing identity (FindIdentity). A short page mid-list is ErrPaging.
func (c *Client) ListHostIdentities(ctx context.Context, progress func(done, total int)) ([]Identity, error) {
	ids, err := c.listOnce(ctx, progress)
	if !errors.Is(err, ErrListChanged) {
		return ids, err
	}
	if ids, err = c.listOnce(ctx, progress); errors.Is(err, ErrListChanged) {
		return nil, fmt.Errorf("%w (on the second reading too)", err)
	}
	return ids, err
}

func (c *Client) listOnce(ctx context.Context, progress func(done, total int)) ([]Identity, error) {
	filter := fmt.Sprintf("name contains %s", quote(HostPrefix))
	first, total, stride, err := c.page(ctx, filter, 0, c.cfg.PageSize)
	if err != nil {
		return nil, err
	}
	if total > maxIdentities {
		return nil, fmt.Errorf("ziti: list identities: totalCount %d is beyond any fleet", total)
	}
	if n := int64(len(first)); n > 0 && n < stride && n < total {
		stride = n // served fewer than asked without saying so: page by what it serves
	}
	pages := 1
	if total > int64(len(first)) && stride > 0 {
		pages = int((total + stride - 1) / stride)
	}
	results := make([][]Identity, pages)
	totals := make([]int64, pages)
	results[0], totals[0] = first, total

	var mu sync.Mutex
	done := 1
	report := func() {
		if progress == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		progress(done, pages)
	}
	report()

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.cfg.Concurrency)
	for i := 1; i < pages; i++ {
		g.Go(func() error {
			items, n, _, err := c.page(gctx, filter, int64(i)*stride, stride)
			if err != nil {
				return err
			}
			results[i], totals[i] = items, n
			mu.Lock()
			done++
			mu.Unlock()
			report()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}

	for i, n := range totals {
		if n != total {
			return nil, fmt.Errorf("ziti: list identities: %w: totalCount %d on the first page, %d on the page at offset %d",
				ErrListChanged, total, n, int64(i)*stride)
		}
	}
	for i, page := range results[:pages-1] {
		if int64(len(page)) != stride {
			return nil, fmt.Errorf("ziti: list identities: %w: the page at offset %d holds %d identities where %d were asked for, with totalCount %d on every page",
				ErrPaging, int64(i)*stride, len(page), stride, total)
		}
	}
	seen := make(map[string]bool, total)
	out := make([]Identity, 0, total)
	for _, page := range results {
		for _, id := range page {
			if seen[id.ID] {
				continue
			}
			seen[id.ID] = true
			if !strings.HasPrefix(id.Name, HostPrefix) {
				continue // "contains" also matches old-monky-host.x: counted, not ours
			}
			out = append(out, id)
		}
	}
	if int64(len(seen)) != total {
		return nil, fmt.Errorf("ziti: list identities: %w: %d distinct identities received, totalCount %d",
			ErrListChanged, len(seen), total)
	}
	return out, nil
}

// page returns one page's identities, totalCount and the limit the controller applied.
func (c *Client) page(ctx context.Context, filter string, offset, limit int64) ([]Identity, int64, int64, error) {
	params := identity.NewListIdentitiesParamsWithContext(ctx).WithTimeout(c.cfg.Timeout).
		WithFilter(&filter).WithLimit(&limit).WithOffset(&offset)
	resp, err := c.mc.Identity.ListIdentities(params, c.session)
	if err != nil {
		return nil, 0, 0, wrap(fmt.Sprintf("list identities (offset %d)", offset), err)
	}
	p := resp.Payload
	if p == nil || p.Meta == nil || p.Meta.Pagination == nil || p.Meta.Pagination.TotalCount == nil {
		return nil, 0, 0, fmt.Errorf("ziti: list identities (offset %d): the answer has no meta.pagination.totalCount", offset)
	}
	applied := limit
	if l := p.Meta.Pagination.Limit; l != nil && *l > 0 && *l < limit {
		applied = *l
	}
	out := make([]Identity, 0, len(p.Data))
	for i, d := range p.Data {
		id, err := fromDetail(d)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("ziti: list identities (offset %d): data[%d]: %w", offset, i, err)
		}
		out = append(out, id)
	}
	return out, *p.Meta.Pagination.TotalCount, applied, nil
}

// FindIdentity returns the identity with exactly this name, or an error matching ErrNotFound.
func (c *Client) FindIdentity(ctx context.Context, name string) (*Identity, error) {
	filter := fmt.Sprintf("name = %s", quote(name))
	items, _, _, err := c.page(ctx, filter, 0, 2)
	if err != nil {
		return nil, err
	}
	for _, it := range items {
		if it.Name == name {
			return &it, nil
		}
	}
	return nil, fmt.Errorf("ziti: identity %q: %w", name, ErrNotFound)
}

// Detail reads one identity by id.
func (c *Client) Detail(ctx context.Context, id string) (*Identity, error) {
	d, err := c.detail(ctx, id)
	if err != nil {
		return nil, err
	}
	out, err := fromDetail(d)
	if err != nil {
		return nil, fmt.Errorf("ziti: identity %s: %w", id, err)
	}
	return &out, nil
}

func (c *Client) detail(ctx context.Context, id string) (*rest_model.IdentityDetail, error) {
	resp, err := c.mc.Identity.DetailIdentity(identity.NewDetailIdentityParamsWithContext(ctx).WithTimeout(c.cfg.Timeout).WithID(id), c.session)
	if err != nil {
		return nil, wrap(fmt.Sprintf("read identity %s", id), err)
	}
	if resp.Payload == nil || resp.Payload.Data == nil {
		return nil, fmt.Errorf("ziti: read identity %s: the answer has no data", id)
	}
	return resp.Payload.Data, nil
}

// SetRoleAttributes replaces the identity's role attributes with attrs. The controller replaces
// the whole list: callers pass what must remain as well as what they add (MergeAttributes).
func (c *Client) SetRoleAttributes(ctx context.Context, id string, attrs []string) error {
	list := rest_model.Attributes(append([]string{}, attrs...))
	params := identity.NewPatchIdentityParamsWithContext(ctx).WithTimeout(c.cfg.Timeout).
		WithID(id).WithIdentity(&rest_model.IdentityPatch{RoleAttributes: &list})
	if _, err := c.mc.Identity.PatchIdentity(params, c.session); err != nil {
		return wrap(fmt.Sprintf("patch identity %s", id), err)
	}
	return nil
}

// CreateHostIdentity creates a Device identity, not an admin, with attrs and a pending one-time
// token enrolment, and returns its id.
func (c *Client) CreateHostIdentity(ctx context.Context, name string, attrs []string) (string, error) {
	list := rest_model.Attributes(append([]string{}, attrs...))
	notAdmin := false
	body := &rest_model.IdentityCreate{
		Name:           &name,
		IsAdmin:        &notAdmin,
		Type:           rest_model.IdentityTypeDevice.Pointer(),
		RoleAttributes: &list,
		Enrollment:     &rest_model.IdentityCreateEnrollment{Ott: true},
	}
	resp, err := c.mc.Identity.CreateIdentity(identity.NewCreateIdentityParamsWithContext(ctx).WithTimeout(c.cfg.Timeout).WithIdentity(body), c.session)
	if err != nil {
		return "", wrap(fmt.Sprintf("create identity %q", name), err)
	}
	if resp.Payload == nil || resp.Payload.Data == nil || resp.Payload.Data.ID == "" {
		return "", fmt.Errorf("ziti: create identity %q: the answer has no id", name)
	}
	return resp.Payload.Data.ID, nil
}

// Enrollment is an identity's pending one-time-token enrolment.
type Enrollment struct {
	JWT       secret.Value
	ExpiresAt time.Time
}

// EnrollmentJWT returns the pending OTT enrolment, or ErrNoEnrollment (enrolled, or expired).
func (c *Client) EnrollmentJWT(ctx context.Context, id string) (*Enrollment, error) {
	d, err := c.detail(ctx, id)
	if err != nil {
		return nil, err
	}
	if d.Enrollment == nil || d.Enrollment.Ott == nil || d.Enrollment.Ott.JWT == "" {
		return nil, fmt.Errorf("ziti: identity %s: %w", id, ErrNoEnrollment)
	}
	return &Enrollment{JWT: secret.New(d.Enrollment.Ott.JWT), ExpiresAt: time.Time(d.Enrollment.Ott.ExpiresAt)}, nil
}

func fromDetail(d *rest_model.IdentityDetail) (Identity, error) {
	if d == nil {
		return Identity{}, errors.New("null identity")
	}
	if d.ID == nil || *d.ID == "" {
		return Identity{}, errors.New("identity without id")
	}
	if d.Name == nil || *d.Name == "" {
		return Identity{}, fmt.Errorf("identity %s without name", *d.ID)
	}
	out := Identity{ID: *d.ID, Name: *d.Name, Online: d.HasEdgeRouterConnection, HasAPISession: d.HasAPISession}
	if d.RoleAttributes != nil {
		out.RoleAttributes = append([]string{}, (*d.RoleAttributes)...)
	}
	if d.EdgeRouterConnectionStatus != nil {
		out.MeshStatus = *d.EdgeRouterConnectionStatus
	}
	if d.EnvInfo != nil {
		out.Hostname = d.EnvInfo.Hostname
	}
	if d.SdkInfo != nil {
		out.SDKVersion = d.SdkInfo.Version
		out.SDKApp = d.SdkInfo.AppID
		if out.SDKApp == "" {
			out.SDKApp = d.SdkInfo.Type
		}
	}
	out.EnrollmentPending = d.Enrollment != nil && d.Enrollment.Ott != nil && d.Enrollment.Ott.JWT != ""
	return out, nil
}

// drainingTransport reads a body to EOF before closing it: the generated decoder leaves the
// trailing newline, and net/http reuses no connection with an unread body (a TLS handshake a page).
// It also records the first 2xx answer to a request that carried the session (Client.Answered).
type drainingTransport struct {
	answered *atomic.Bool
	rt       http.RoundTripper
}

func (d drainingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := d.rt.RoundTrip(r)
	if err == nil && resp.StatusCode/100 == 2 && r.Header.Get("zt-session") != "" {
		d.answered.Store(true)
	}
	if err == nil && resp.Body != nil {
		resp.Body = drainingBody{resp.Body}
	}
	return resp, err
}

type drainingBody struct{ io.ReadCloser }

func (b drainingBody) Close() error {
	_, _ = io.Copy(io.Discard, io.LimitReader(b.ReadCloser, 64<<10))
	return b.ReadCloser.Close()
}

// quote writes a string literal of the controller's filter language.
func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(s) + `"`
}
