package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-openapi/runtime"
	openapiclient "github.com/go-openapi/runtime/client"
	"github.com/go-openapi/strfmt"
	client "github.com/openziti/edge-api/rest_client_api_client"
	"github.com/openziti/edge-api/rest_client_api_client/authentication"
	"github.com/openziti/edge-api/rest_client_api_client/current_api_session"
	"github.com/openziti/edge-api/rest_model"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/identity"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/capread"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/neterr"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/noredirect"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/zitierr"
)

// clientAPIPath is where the controller serves its edge client API.
const clientAPIPath = "/edge/client/v1"

// defaultExtendTimeout bounds each request of a renewal.
const defaultExtendTimeout = 30 * time.Second

// maxAnswer bounds each answer of the controller: its largest is a certificate chain.
const maxAnswer = 1 << 20

var errAnswerTooLarge = fmt.Errorf("the controller's answer is larger than %d bytes", maxAnswer)

// cappedAnswers gives each response a body that fails past maxAnswer bytes, so an endless answer
// is not read into memory until the timeout.
type cappedAnswers struct{ rt http.RoundTripper }

func (c cappedAnswers) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(req)
	if err == nil {
		resp.Body = cappedBody{capread.New(resp.Body, maxAnswer, errAnswerTooLarge), resp.Body}
	}
	return resp, err
}

type cappedBody struct {
	io.Reader
	io.Closer
}

// Extender reaches the controller's edge client API directly (the SDK does the same; it is not a
// mesh service), authenticated by TLS with an identity file's certificate, for the certificate's
// extension (identity.Controller). Its sessions are legacy API sessions (zt-session) it opens and
// deletes itself: it never touches a session the SDK or a cache holds.
type Extender struct {
	// Timeout bounds each request (0: 30 s).
	Timeout time.Duration
}

// Open authenticates with f's certificate at the first of its controllers that answers.
func (e Extender) Open(ctx context.Context, f *identity.File) (identity.Session, error) {
	if f.Key == nil {
		return nil, errors.New("ziti controller: the identity's key is held by an engine the agent cannot use")
	}
	var errs []error
	for _, raw := range f.Controllers {
		s, err := e.open(ctx, f, raw)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, identity.ErrUnreachable) {
			return nil, err
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func (e Extender) open(ctx context.Context, f *identity.File, raw string) (*extendSession, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("ziti controller %q: %w", raw, err)
	}
	base := strings.TrimSuffix(u.Path, "/")
	if !strings.HasSuffix(base, clientAPIPath) {
		base += clientAPIPath
	}
	chain := make([][]byte, len(f.Cert))
	for i, c := range f.Cert {
		chain[i] = c.X509.Raw
	}
	tr := &http.Transport{
		Proxy: nil, // the SDK dials the controller directly; so does the renewal
		TLSClientConfig: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			RootCAs:      f.CAPool(),
			Certificates: []tls.Certificate{{Certificate: chain, PrivateKey: f.Key, Leaf: f.Leaf().X509}},
		},
		TLSHandshakeTimeout: 15 * time.Second,
		MaxIdleConnsPerHost: 1,
	}
	hc := &http.Client{Transport: cappedAnswers{rt: tr}, CheckRedirect: noredirect.Refuse}
	rt := openapiclient.NewWithClient(u.Host, base, []string{"https"}, hc)
	rt.SetDebug(false) // go-openapi would print the session token and the certificates
	s := &extendSession{api: client.New(rt, strfmt.Default), timeout: e.Timeout, host: u.Host, tr: tr}
	if s.timeout <= 0 {
		s.timeout = defaultExtendTimeout
	}
	params := authentication.NewAuthenticateParamsWithContext(ctx).WithTimeout(s.timeout).WithMethod("cert").WithAuth(&rest_model.Authenticate{})
	resp, err := s.api.Authentication.Authenticate(params)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, s.classify("authenticate", err)
	}
	d := resp.Payload.Data
	if d == nil || d.Token == nil || *d.Token == "" {
		tr.CloseIdleConnections()
		return nil, fmt.Errorf("ziti controller %s: authenticate: the answer has no session token", u.Host)
	}
	s.auth = openapiclient.APIKeyAuth("zt-session", "header", *d.Token)
	if d.AuthenticatorID == nil || *d.AuthenticatorID == "" {
		cur, err := s.api.CurrentAPISession.GetCurrentAPISession(current_api_session.NewGetCurrentAPISessionParamsWithContext(ctx).WithTimeout(s.timeout), s.auth)
		if err != nil {
			s.Close(ctx)
			return nil, s.classify("current-api-session", err)
		}
		if cur.Payload == nil || cur.Payload.Data == nil {
			s.Close(ctx)
			return nil, fmt.Errorf("ziti controller %s: current-api-session: the answer has no data", u.Host)
		}
		d = cur.Payload.Data
	}
	if d.AuthenticatorID == nil || *d.AuthenticatorID == "" {
		s.Close(ctx)
		return nil, fmt.Errorf("ziti controller %s: the API session names no authenticator", u.Host)
	}
	s.info = identity.SessionInfo{
		AuthenticatorID:  *d.AuthenticatorID,
		Extendable:       d.IsCertExtendable != nil && *d.IsCertExtendable,
		ExtendRequested:  d.IsCertExtendRequested,
		KeyRollRequested: d.IsCertKeyRollRequested,
	}
	return s, nil
}

// extendSession is one legacy API session opened with the identity's certificate.
type extendSession struct {
	api     *client.ZitiEdgeClient
	auth    runtime.ClientAuthInfoWriter
	info    identity.SessionInfo
	timeout time.Duration
	host    string
	tr      *http.Transport
}

func (s *extendSession) Info() identity.SessionInfo { return s.info }

func (s *extendSession) Extend(ctx context.Context, csrPEM []byte) ([]byte, error) {
	csr := string(csrPEM)
	params := current_api_session.NewExtendCurrentIdentityAuthenticatorParamsWithContext(ctx).WithTimeout(s.timeout).
		WithID(s.info.AuthenticatorID).WithExtend(&rest_model.IdentityExtendEnrollmentRequest{ClientCertCsr: &csr})
	resp, err := s.api.CurrentAPISession.ExtendCurrentIdentityAuthenticator(params, s.auth)
	if err != nil {
		return nil, s.classify("extend", err)
	}
	if resp.Payload == nil || resp.Payload.Data == nil || resp.Payload.Data.ClientCert == "" {
		return nil, fmt.Errorf("ziti controller %s: extend: the answer has no clientCert", s.host)
	}
	return []byte(resp.Payload.Data.ClientCert), nil
}

func (s *extendSession) Verify(ctx context.Context, certPEM []byte) error {
	cert := string(certPEM)
	params := current_api_session.NewExtendVerifyCurrentIdentityAuthenticatorParamsWithContext(ctx).WithTimeout(s.timeout).
		WithID(s.info.AuthenticatorID).WithExtend(&rest_model.IdentityExtendValidateEnrollmentRequest{ClientCert: &cert})
	if _, err := s.api.CurrentAPISession.ExtendVerifyCurrentIdentityAuthenticator(params, s.auth); err != nil {
		return s.classify("extend-verify", err)
	}
	return nil
}

// Close deletes the API session: each renewal leaves none behind at the controller.
func (s *extendSession) Close(ctx context.Context) {
	defer s.tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(s.timeout, 10*time.Second))
	defer cancel()
	_, _ = s.api.CurrentAPISession.DeleteCurrentAPISession(current_api_session.NewDeleteCurrentAPISessionParamsWithContext(ctx), s.auth)
}

// classify sorts a call's failure into identity's sentinels, keeping the controller's words.
func (s *extendSession) classify(op string, err error) error {
	if se := zitierr.Status("ziti controller "+s.host, op, err); se != nil {
		status := se.Status
		switch {
		case status == http.StatusUnauthorized || status == http.StatusForbidden:
			return fmt.Errorf("%w: %w", identity.ErrRefused, se)
		case status == http.StatusTooManyRequests || status >= 500:
			return fmt.Errorf("%w: %w", identity.ErrUnreachable, se)
		}
		return fmt.Errorf("%w: %w", identity.ErrRejected, se)
	}
	if strings.Contains(err.Error(), "remote error: tls:") {
		// The controller ended the handshake over the certificate we presented (expired, unknown).
		return fmt.Errorf("%w: ziti controller %s: %s: the TLS handshake was refused: %v", identity.ErrRefused, s.host, op, err)
	}
	switch neterr.Classify(context.Background(), err) {
	case neterr.Network:
		return fmt.Errorf("%w: ziti controller %s: %s: %v", identity.ErrUnreachable, s.host, op, err)
	case neterr.TLS:
		return fmt.Errorf("ziti controller %s: %s: its certificate does not verify against the identity's CA (id.ca): %v", s.host, op, err)
	}
	return fmt.Errorf("ziti controller %s: %s: %v", s.host, op, err)
}
