// Package neterr sorts the failures of a request to another service (tenancy, OpenBao, the ziti
// controller), so each client decides retry or stop the same way, and carries an HTTP error answer.
package neterr

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/url"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/noredirect"
)

// Class is what kind of failure a request error is.
type Class int

const (
	// Other is none of the below: for a client that got an answer, one it could not read.
	Other Class = iota
	// Redirect: the server redirected, which no client follows; the same answer comes next minute.
	Redirect
	// TLS: the server's certificate does not verify against the configured CA.
	TLS
	// Canceled: the caller gave up (shutdown); that is not the network's fault.
	Canceled
	// NoRoute: no route, or the identity may not see the service; a retry changes nothing.
	NoRoute
	// Network: refused, reset, timed out or cut short; a retry may succeed.
	Network
)

// Classify sorts err, a request's failure under ctx; the order matters: chains overlap.
func Classify(ctx context.Context, err error) Class {
	var redirect *noredirect.Error
	var ue *url.Error
	switch {
	case errors.As(err, &redirect):
		return Redirect
	case IsTLS(err):
		return TLS
	case errors.Is(ctx.Err(), context.Canceled):
		return Canceled
	case isNoRoute(err):
		return NoRoute
	case errors.As(err, &ue), errors.Is(err, context.DeadlineExceeded), isTimeout(err),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return Network
	}
	return Other
}

// IsTLS reports whether err is a certificate that did not verify.
func IsTLS(err error) bool {
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	var cv *tls.CertificateVerificationError
	return errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci) || errors.As(err, &cv)
}

// isNoRoute: the transport's own faults that no retry mends (a target it has no route for, a
// service the identity may not see) say so with a NoRoute method.
func isNoRoute(err error) bool {
	var nr interface{ NoRoute() bool }
	return errors.As(err, &nr) && nr.NoRoute()
}

func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne)
}

// StatusError is a non-2xx answer, with the error body's code and message when it had them.
type StatusError struct {
	Service string // "tenancy", "ziti"
	Op      string
	Status  int
	Code    string
	Message string
}

func (e *StatusError) Error() string {
	s := fmt.Sprintf("%s: %s: HTTP %d", e.Service, e.Op, e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Is matches a *Status sentinel by status, and by code when the sentinel has one.
func (e *StatusError) Is(target error) bool {
	s, ok := target.(*Status)
	return ok && s.Status == e.Status && (s.Code == "" || s.Code == e.Code)
}

// Status is a sentinel for errors.Is that matches every *StatusError of its status (and code).
type Status struct {
	Status int
	Code   string
	Text   string
}

func (s *Status) Error() string { return s.Text }
