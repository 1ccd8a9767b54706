// Package zitierr reads the ziti controller's HTTP errors as edge-api's generated clients return
// them, for the agent (certificate renewal) and fleetctl (the management API) alike.
package zitierr

import (
	"errors"
	"net/http"

	"github.com/go-openapi/runtime"
	"github.com/openziti/edge-api/rest_model"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/neterr"
)

// Status is err as a *neterr.StatusError naming service and op, with the controller's code and
// message from its error envelope (the status text when it sent none); nil when err carries no
// HTTP status (a network or TLS failure).
func Status(service, op string, err error) *neterr.StatusError {
	var coded interface{ Code() int }
	var apiErr *runtime.APIError
	status := 0
	switch {
	case errors.As(err, &coded):
		status = coded.Code()
	case errors.As(err, &apiErr):
		status = apiErr.Code
	}
	if status == 0 {
		return nil
	}
	se := &neterr.StatusError{Service: service, Op: op, Status: status}
	var withPayload interface {
		GetPayload() *rest_model.APIErrorEnvelope
	}
	if errors.As(err, &withPayload) {
		if p := withPayload.GetPayload(); p != nil && p.Error != nil {
			se.Code, se.Message = p.Error.Code, p.Error.Message
		}
	}
	if se.Message == "" {
		se.Message = http.StatusText(status)
	}
	return se
}
