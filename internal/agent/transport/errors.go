package transport

import (
	"errors"
	"fmt"
)

// Kinds of identity fault (errors.Is on an *IdentityError); each wants a different fix.
var (
	// ErrIdentityMissing: the identity file does not exist.
	ErrIdentityMissing = errors.New("identity file missing")
	// ErrIdentityUnreadable: the file exists but this uid may not read it.
	ErrIdentityUnreadable = errors.New("identity file unreadable")
	// ErrIdentityMalformed: empty, not JSON, not a ziti identity, or refused by the SDK loader.
	ErrIdentityMalformed = errors.New("identity file malformed")
	// ErrIdentityBadCert: id.cert (or id.ca) holds no usable certificate.
	ErrIdentityBadCert = errors.New("identity certificate unusable")
	// ErrIdentityBadKey: id.key holds no usable private key, or one that does not match id.cert.
	ErrIdentityBadKey = errors.New("identity key unusable")
)

// Kinds of service fault, matched with errors.Is on a *ServiceError.
var (
	// ErrServiceNotVisible: no role attribute or service policy for this identity; retrying won't help.
	ErrServiceNotVisible error = &noRouteError{"service not visible to this identity"}
	// ErrNoTerminators: the service exists but nothing hosts it right now.
	ErrNoTerminators = errors.New("service has no terminators")
	// ErrProxyUnreachable: proxy mode, and nothing answers on the loopback proxy address.
	ErrProxyUnreachable = errors.New("proxy not answering")
)

// ErrUnmapped: a (host, port) the sdk or proxy transport has no route for; the text names both.
var ErrUnmapped error = &noRouteError{"target not mapped to a ziti service"}

// noRouteError is a fault no retry mends; neterr.Classify sorts it as NoRoute by its method.
type noRouteError struct{ msg string }

func (e *noRouteError) Error() string { return e.msg }

// NoRoute marks the error for neterr without neterr importing the transport.
func (*noRouteError) NoRoute() bool { return true }

// ErrClosed is returned by a dial on a Transport after Close.
var ErrClosed = errors.New("transport closed")

// IdentityError's Error() is the journal line the runbook matches; it never quotes key material.
type IdentityError struct {
	Path   string
	Reason string
	Kind   error // one of the ErrIdentity* values
	Err    error // the underlying error, when there is one
}

func (e *IdentityError) Error() string {
	if e.Path == "" {
		return "transport sdk: identity " + e.Reason
	}
	return fmt.Sprintf("transport sdk: identity %s %s", e.Path, e.Reason)
}

// Unwrap exposes both the kind and the cause to errors.Is/As.
func (e *IdentityError) Unwrap() []error { return nonNil(e.Kind, e.Err) }

// ServiceError says which ziti service could not be reached and why, pointing at the fix.
type ServiceError struct {
	Service string
	Reason  string
	Kind    error // ErrServiceNotVisible, ErrNoTerminators, ErrProxyUnreachable or nil
	Err     error // the underlying error, when there is one
}

func (e *ServiceError) Error() string {
	return fmt.Sprintf("ziti service %s: %s", e.Service, e.Reason)
}

// Unwrap exposes both the kind and the cause to errors.Is/As.
func (e *ServiceError) Unwrap() []error { return nonNil(e.Kind, e.Err) }

func nonNil(errs ...error) []error {
	out := errs[:0:0]
	for _, err := range errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}
