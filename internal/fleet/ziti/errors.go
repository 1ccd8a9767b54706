package ziti

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/neterr"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/noredirect"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/zitierr"
)

// Errors callers branch on.
var (
	ErrUnauthorized error = &neterr.Status{Status: http.StatusUnauthorized, Text: "unauthorized"} // credentials or session
	ErrNotFound     error = &neterr.Status{Status: http.StatusNotFound, Text: "not found"}        // 404 or empty lookup by name
	ErrNoEnrollment       = errors.New("no pending enrollment")
	// ErrListChanged: the list changed while paged through, twice in a row.
	ErrListChanged = errors.New("the identity list changed while it was read")
	// ErrPaging: a short page in the middle of an unchanged list.
	ErrPaging = errors.New("the controller paged differently from what it was asked and said")
)

// wrap turns what the generated client returns into an error that reads without pointer dumps.
func wrap(op string, err error) error {
	if se := zitierr.Status("ziti", op, err); se != nil {
		return se
	}
	var redirect *noredirect.Error
	var unknownCA x509.UnknownAuthorityError
	switch {
	case errors.As(err, &redirect):
		return fmt.Errorf("ziti: %s: %w", op, redirect) // not the *url.Error: it quotes the query
	case errors.As(err, &unknownCA):
		return fmt.Errorf("ziti: %s: %w (set ziti.ca_file to the controller's CA bundle)", op, err)
	}
	return fmt.Errorf("ziti: %s: %w", op, err)
}
