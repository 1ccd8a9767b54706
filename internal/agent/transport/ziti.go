package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/openziti/identity"
	edge_apis "github.com/openziti/sdk-golang/edge-apis"
	"github.com/openziti/sdk-golang/ziti"
)

// zitiDialer is a ServiceDialer over one ziti SDK context.
type zitiDialer struct {
	zctx ziti.Context
}

// newZitiDialer pre-flights and loads the identity under recover (the SDK's lazy loader exits or
// panics on bad material); it does not wait on the network.
func newZitiDialer(path string, readFile func(string) ([]byte, error), logger *slog.Logger) (*zitiDialer, error) {
	raw, err := checkIdentity(path, readFile)
	if err != nil {
		return nil, err
	}
	routeSDKLogs(logger)

	var cfg ziti.Config
	if err := json.Unmarshal(raw, &cfg); err != nil { // checked above; kept for safety
		return nil, &IdentityError{Path: path, Reason: fmt.Sprintf("is not valid JSON: %v", err), Kind: ErrIdentityMalformed, Err: err}
	}
	var id identity.Identity
	err = safeCall("load identity", func() error {
		var err error
		id, err = identity.LoadIdentity(cfg.ID)
		return err
	})
	if err != nil {
		return nil, &IdentityError{Path: path, Reason: fmt.Sprintf("could not be loaded: %v", err), Kind: ErrIdentityMalformed, Err: err}
	}
	creds := edge_apis.NewIdentityCredentials(id)
	creds.ConfigTypes = cfg.ConfigTypes
	cfg.Credentials = creds
	cfg.ID = identity.Config{} // Credentials win; clear ID so nothing falls back to the lazy loader

	var zctx ziti.Context
	err = safeCall("create ziti context", func() error {
		var err error
		zctx, err = ziti.NewContext(&cfg)
		return err
	})
	if err != nil {
		return nil, &IdentityError{Path: path, Reason: fmt.Sprintf("could not start a ziti context: %v", err), Kind: ErrIdentityMalformed, Err: err}
	}
	return &zitiDialer{zctx: zctx}, nil
}

// DialService dials in a goroutine and stops waiting when ctx is done: sdk-golang v1.9.0's first
// dial ignores ctx until the controller answers. A late dial is closed.
func (d *zitiDialer) DialService(ctx context.Context, service string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var conn net.Conn
		err := safeCall("dial "+service, func() error {
			c, err := d.zctx.DialContext(ctx, service)
			if err != nil {
				return err
			}
			conn = c
			return nil
		})
		done <- result{conn, err}
	}()
	select {
	case r := <-done:
		return r.conn, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.conn != nil {
				r.conn.Close()
			}
		}()
		return nil, fmt.Errorf("no answer from the ziti controller or edge router (is the controller reachable?): %w", ctx.Err())
	}
}

func (d *zitiDialer) Close() error {
	return safeCall("close ziti context", func() error {
		d.zctx.Close()
		return nil
	})
}

// serviceInfo is what an error about a service tells the operator to check.
type serviceInfo struct {
	name     string
	attr     string // the role attribute that grants dial, e.g. #monky-deploy-agent
	hostedBy string // who should be hosting it
}

func tenancyInfo(name string) serviceInfo {
	return serviceInfo{name: name, attr: "#monky-deploy-agent", hostedBy: "tenancy's sidecar is not hosting it"}
}

func baoInfo(name string) serviceInfo {
	return serviceInfo{name: name, attr: "#openbao-client", hostedBy: "OpenBao's ziti host is not hosting it"}
}

// classifyDialError turns SDK texts (matched as substrings, per api-notes) into what the operator
// should check; anything else keeps its own words.
func classifyDialError(ctx context.Context, svc serviceInfo, err error) error {
	var se *ServiceError
	var ie *IdentityError
	if errors.As(err, &se) || errors.As(err, &ie) {
		return err
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "service '"+svc.name+"' not found"):
		return &ServiceError{Service: svc.name, Reason: "not visible to this identity: check " + svc.attr, Kind: ErrServiceNotVisible, Err: err}
	case strings.Contains(msg, "has no terminators"):
		return &ServiceError{Service: svc.name, Reason: "has no terminators: " + svc.hostedBy, Kind: ErrNoTerminators, Err: err}
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		return &ServiceError{Service: svc.name, Reason: fmt.Sprintf("dial abandoned (%v): %s", ctx.Err(), msg), Err: errors.Join(ctx.Err(), err)}
	}
	return &ServiceError{Service: svc.name, Reason: "dial failed: " + msg, Err: err}
}
